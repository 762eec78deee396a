package layout

import "testing"

func TestKeys(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{BudgetKey("payments", 2, 1_700_000_000_000), "b#payments#2#1700000000000"},
		{StateKey("payments"), "c#payments"},
		{OverrideKey("payments"), "c#payments#override"},
		{WindowKey("payments", 1_700_000_000_000), "c#payments#w#1700000000000"},
		{ProbeKey("payments", 2), "c#payments#p#2"},
		{OverrideKeyPattern, "c#*#override"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestTTLSecondsRoundsUp(t *testing.T) {
	for _, c := range []struct{ ms, want int64 }{{0, 0}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {1_700_000_020_001, 1_700_000_021}} {
		if got := TTLSeconds(c.ms); got != c.want {
			t.Errorf("TTLSeconds(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
}
