package dynamo

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/internal/layout"
)

func TestActions(t *testing.T) {
	// No PutItem: every write is an UpdateItem, SetOverride's included.
	want := []string{"dynamodb:BatchGetItem", "dynamodb:UpdateItem"}
	if got := Actions(); !slices.Equal(got, want) {
		t.Errorf("Actions() = %v, want %v", got, want)
	}
	wantTable := []string{"dynamodb:CreateTable", "dynamodb:DeleteTable", "dynamodb:DescribeTable", "dynamodb:DescribeTimeToLive", "dynamodb:UpdateTimeToLive"}
	if got := TableActions(); !slices.Equal(got, wantTable) {
		t.Errorf("TableActions() = %v, want %v", got, wantTable)
	}
	// Each action is a real DynamoDB operation: a method of the SDK client
	// with the same signature.
	client := reflect.TypeFor[*dynamodb.Client]()
	for _, it := range []reflect.Type{reflect.TypeFor[API](), reflect.TypeFor[TableAPI]()} {
		for i := range it.NumMethod() {
			m := it.Method(i)
			cm, ok := client.MethodByName(m.Name)
			if !ok {
				t.Errorf("%s.%s is not a method of *dynamodb.Client", it.Name(), m.Name)
				continue
			}
			// cm.Type has the receiver as its first parameter.
			if cm.Type.NumIn() != m.Type.NumIn()+1 || cm.Type.NumOut() != m.Type.NumOut() {
				t.Errorf("%s.%s has another signature than the SDK's", it.Name(), m.Name)
			}
		}
	}
	// The slice is the caller's to keep.
	a := Actions()
	a[0] = "mutated"
	if Actions()[0] == "mutated" {
		t.Error("Actions returns shared state")
	}
}

func TestSpec(t *testing.T) {
	s := Spec()
	if s.PartitionKey != "pk" || s.PartitionKeyType != types.ScalarAttributeTypeS || s.TTLAttribute != "expires" || s.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("Spec() = %+v", s)
	}
	// The attribute names the stores write agree with the spec.
	if layout.AttrPK != s.PartitionKey || layout.AttrExpires != s.TTLAttribute {
		t.Errorf("attribute constants %q, %q disagree with Spec", layout.AttrPK, layout.AttrExpires)
	}
	for _, k := range []string{layout.StateKey("x"), layout.OverrideKey("x"), layout.ProbeKey("x", 0)} {
		if !strings.HasPrefix(k, "c#x") {
			t.Errorf("key %q", k)
		}
	}
}
