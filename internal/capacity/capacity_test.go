package capacity

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNumberSize(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
	}{
		{"0", 1}, {"7", 2}, {"12", 2}, {"123", 3}, {"1000", 2},
		{"0.001", 2}, {"1700000000123", 8},
		// Measured on DynamoDB Local 3.3.1 (the smallest padding that takes
		// an item past 1 KB): digits pair up from the decimal point, and a
		// negative number takes one byte more.
		{"150", 3}, {"15000", 3}, {"1500", 2}, {"2100000", 3}, {"3000000", 2}, {"100000", 2},
		{"1.5", 3}, {"0.5", 2}, {"0.05", 2}, {"3.14159", 5}, {"1230", 3}, {"12300", 3},
		{"-1", 3}, {"-12", 3}, {"-150", 4}, {"-1500", 3}, {"-0.001", 3},
		{"1700000000", 2}, {"1700000000000", 3}, {"1700000070", 6}, {"1700000080", 6},
		{"1E+3", 2}, {"1.5e-3", 2}, {"99999999999999999999999999999999999999", 20},
	} {
		if got := NumberSize(c.v); got != c.want {
			t.Errorf("NumberSize(%q) = %d, want %d", c.v, got, c.want)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, c := range []struct{ before, after, want int }{
		{0, 0, 1}, {0, 100, 1}, {1024, 10, 1}, {1025, 10, 2}, {10, 3000, 3}, {10465, 10485, 11},
	} {
		if got := WriteUnits(c.before, c.after); got != float64(c.want) {
			t.Errorf("WriteUnits(%d, %d) = %v, want %d", c.before, c.after, got, c.want)
		}
	}
	if got := ReadUnits(4097, true); got != 2 {
		t.Errorf("ReadUnits(4097, strong) = %v, want 2", got)
	}
	if got := ReadUnits(100, false); got != 0.5 {
		t.Errorf("ReadUnits(100, eventual) = %v, want 0.5", got)
	}
}

func TestMeterThrottlesHotItem(t *testing.T) {
	m := NewMeter(Config{Throttle: true})
	t0 := time.Unix(1_700_000_000, 0)
	var ok, throttled int
	for i := range 1500 {
		err := m.Write("hot", t0.Add(time.Duration(i)*time.Millisecond/2), 100, 100) // 1,500 writes in 0.75 s
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrThrottled):
			throttled++
		default:
			t.Fatal(err)
		}
	}
	if ok != ItemWriteUnitsPerSecond || throttled != 500 {
		t.Fatalf("1,500 one-unit writes in one second: %d applied, %d throttled; want 1000 and 500", ok, throttled)
	}
	if err := m.Write("hot", t0.Add(time.Second), 100, 100); err != nil {
		t.Fatalf("the next second: %v", err)
	}
	if err := m.Write("cold", t0, 100, 100); err != nil {
		t.Fatalf("another item in the hot second: %v", err)
	}
	s := m.Stats()
	if s.PeakItemWriteUnits != 1000 || s.HottestWriteItem != "hot" || s.ThrottledWrites != 500 {
		t.Fatalf("stats %+v", s)
	}
}

// A reservation holds its estimate against the limit until it is settled
// with the units really consumed; a settlement of 0 counts no request.
func TestReservations(t *testing.T) {
	m := NewMeter(Config{Throttle: true})
	t0 := time.Unix(1_700_000_000, 0)
	r1, err := m.ReserveWrite("hot", t0, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReserveWrite("hot", t0, 500); !errors.Is(err, ErrThrottled) {
		t.Fatalf("600 units pending + 500 in one second: %v, want ErrThrottled", err)
	}
	r1.Settle(300) // the request consumed less than estimated
	r2, err := m.ReserveWrite("hot", t0.Add(time.Millisecond), 500)
	if err != nil {
		t.Fatalf("300 consumed + 500: %v", err)
	}
	r2.Settle(0) // failed without consuming anything
	r2.Settle(9) // only the first settlement counts
	r4, err := m.ReserveWrite("hot", t0.Add(2*time.Millisecond), 700)
	if err != nil {
		t.Fatalf("300 consumed + 700: %v", err)
	}
	r4.Settle(700)
	if err := m.Write("hot", t0.Add(3*time.Millisecond), 0, 1); !errors.Is(err, ErrThrottled) {
		t.Fatalf("1,000 consumed + 1: %v, want ErrThrottled", err)
	}
	r3, err := m.ReserveRead("hot", t0.Add(999*time.Millisecond), 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Read("hot", t0.Add(time.Second), 100, false); err != nil { // a new second
		t.Fatal(err)
	}
	r3.Settle(1) // its second is over: the totals only
	s := m.Stats()
	if s.Writes != 2 || s.WriteUnits != 1000 || s.PeakItemWriteUnits != 1000 || s.ThrottledWrites != 2 {
		t.Fatalf("writes: %+v", s)
	}
	if s.Reads != 2 || s.ReadUnits != 1.5 || s.PeakItemReadUnits != 0.5 {
		t.Fatalf("reads: %+v", s)
	}
}

// Item sizes from DynamoDB's JSON, each measured on DynamoDB Local 3.3.1
// (the smallest padding that takes the item past 1 KB).
func TestItemSizeJSON(t *testing.T) {
	for _, c := range []struct {
		item string
		want int
	}{
		{`{"a":{"S":"abc"}}`, 4},
		{`{"n":{"N":"1700000000"}}`, 3},
		{`{"n":{"N":"123456789"}}`, 7},
		{`{"envs":{"SS":["` + strings.Repeat("0", 48) + `"]}}`, 52},
		{`{"ns":{"NS":["1","22","333"]}}`, 9},
		{`{"l":{"L":[{"S":"ab"},{"S":"cd"}]}}`, 10},
		{`{"b":{"BOOL":true}}`, 2},
		{`{"m":{"M":{"ab":{"S":"cd"}}}}`, 9},
		{`{"m":{"M":{"ab":{"L":[{"N":"12"},{"NULL":true}]}}}}`, 15},
		{`{"b":{"B":"aGVsbG8="}}`, 6},
		{`{"u":{"S":"\u00e9"}}`, 3},
		{`{"n":{"N":"-1500"}}`, 4},
	} {
		var item map[string]json.RawMessage
		if err := json.Unmarshal([]byte(c.item), &item); err != nil {
			t.Fatal(err)
		}
		if got, err := ItemSizeJSON(item); err != nil || got != c.want {
			t.Errorf("ItemSizeJSON(%s) = %d, %v; want %d", c.item, got, err, c.want)
		}
	}
	if _, err := ItemSizeJSON(map[string]json.RawMessage{"x": json.RawMessage(`{"Q":1}`)}); err == nil {
		t.Error("an unknown type was sized")
	}
}
