package capacity

import (
	"encoding/json"
	"fmt"
)

// ItemSizeJSON returns the size of an item given in DynamoDB's JSON wire
// form, attribute name to attribute value ({"S": "..."}, {"N": "..."},
// {"SS": [...]}, {"M": {...}}, ...), by the package rules: what a proxy in
// front of DynamoDB Local reads from requests and answers.
func ItemSizeJSON(item map[string]json.RawMessage) (int, error) {
	size := 0
	for name, v := range item {
		n, err := ValueSizeJSON(v)
		if err != nil {
			return 0, fmt.Errorf("capacity: attribute %q: %w", name, err)
		}
		size += len(name) + n
	}
	return size, nil
}

// attributeValue is DynamoDB's JSON attribute value; exactly one field is
// set. encoding/json decodes B and BS from base64, so their lengths are
// the raw bytes DynamoDB bills.
type attributeValue struct {
	S    *string
	N    *string
	B    []byte
	BOOL *bool
	NULL *bool
	SS   []string
	NS   []string
	BS   [][]byte
	L    []json.RawMessage
	M    map[string]json.RawMessage
}

// ValueSizeJSON returns the size of one attribute value in DynamoDB's JSON
// wire form, without its name.
func ValueSizeJSON(v json.RawMessage) (int, error) {
	var av attributeValue
	if err := json.Unmarshal(v, &av); err != nil {
		return 0, err
	}
	switch {
	case av.S != nil:
		return len(*av.S), nil
	case av.N != nil:
		return NumberSize(*av.N), nil
	case av.B != nil:
		return len(av.B), nil
	case av.BOOL != nil, av.NULL != nil:
		return 1, nil
	case av.SS != nil:
		n := 0
		for _, s := range av.SS {
			n += len(s)
		}
		return n, nil
	case av.NS != nil:
		n := 0
		for _, s := range av.NS {
			n += NumberSize(s)
		}
		return n, nil
	case av.BS != nil:
		n := 0
		for _, b := range av.BS {
			n += len(b)
		}
		return n, nil
	case av.L != nil:
		n := 3
		for _, e := range av.L {
			m, err := ValueSizeJSON(e)
			if err != nil {
				return 0, err
			}
			n += 1 + m
		}
		return n, nil
	case av.M != nil:
		n := 3
		for name, e := range av.M {
			m, err := ValueSizeJSON(e)
			if err != nil {
				return 0, err
			}
			n += 1 + len(name) + m
		}
		return n, nil
	}
	return 0, fmt.Errorf("not a DynamoDB attribute value: %.64s", v)
}
