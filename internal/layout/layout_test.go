package layout

import "testing"

func TestKeys(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{BudgetKey("payments", 2, 1_700_000_000_000), "b#payments#2#1700000000000"},
		{StateKey("payments"), "c#payments"},
		{OverrideKey("payments"), "c#payments#override"},
		{ProbeKey("payments", 2), "c#payments#p#2"},
		{ReplicaKey("payments", 7), "c#payments#r#7"},
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

func TestSlots(t *testing.T) {
	if got := Slots[3]; got != (SlotNames{Bucket: "b3", Requests: "r3", Successes: "s3", Failures: "f3", Samples: "n3"}) {
		t.Errorf("Slots[3] = %+v", got)
	}
	// The slots' attribute names are distinct, and distinct from the
	// state item's other attributes and from the override item's, which a
	// read replica holds beside them.
	seen := map[string]bool{}
	for _, a := range []string{AttrPK, AttrExpires, AttrState, AttrEpoch, AttrOpenUntil, AttrReopens, AttrWatchUntil,
		AttrOverride, AttrUntil, AttrCopiedAt} {
		seen[a] = true
	}
	for _, n := range Slots {
		for _, a := range n.All() {
			if seen[a] {
				t.Errorf("attribute name %q used twice in a read replica", a)
			}
			seen[a] = true
		}
	}
}
