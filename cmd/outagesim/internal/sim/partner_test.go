package sim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var testStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testSchedule() Schedule {
	return Schedule{Normal: 150, Outage: 60, OutageStart: 20 * time.Second, OutageLength: 20 * time.Second}
}

func newTestPartner(t *testing.T, cfg PartnerConfig) *Partner {
	t.Helper()
	clock, err := NewClock(testStart, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPartner(clock, testStart, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestScheduleCapacity(t *testing.T) {
	s := testSchedule()
	for sec, want := range map[int]int{0: 150, 19: 150, 20: 60, 39: 60, 40: 150, 59: 150} {
		if got := s.Capacity(sec); got != want {
			t.Errorf("Capacity(%d) = %d, want %d", sec, got, want)
		}
		if got, want := s.InOutage(sec), want == 60; got != want {
			t.Errorf("InOutage(%d) = %v, want %v", sec, got, want)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, s := range []Schedule{
		{Normal: -1},
		{Outage: -1},
		{OutageStart: 1500 * time.Millisecond, OutageLength: time.Second},
		{OutageStart: time.Second, OutageLength: 500 * time.Millisecond},
		{OutageStart: -time.Second, OutageLength: time.Second},
		{Slot: 300 * time.Millisecond},
		{Slot: 2 * time.Second},
		{Slot: -time.Millisecond},
		{Slot: time.Microsecond},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if err := testSchedule().Validate(); err != nil {
		t.Error(err)
	}
}

// Concurrent arrivals in one second: exactly capacity are served, in each
// second independently, and the counters add up.
func TestPartnerAdmitIsExactUnderConcurrency(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: testSchedule(), Seconds: 60, RejectStatus: 503})
	const workers, perWorker = 16, 25 // 400 arrivals per second
	seconds := []int{5, 20, 39, 40}
	var wg sync.WaitGroup
	served := make([][]int, len(seconds))
	for i, sec := range seconds {
		served[i] = make([]int, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < perWorker; k++ {
					// Spread the arrivals over the second, first attempts on even k.
					now := testStart.Add(time.Duration(sec)*time.Second + time.Duration(w*perWorker+k)*time.Millisecond*2)
					d := p.Admit(now, k%2 == 0)
					if d.Second != sec {
						t.Errorf("arrival at %v counted in second %d, want %d", now.Sub(testStart), d.Second, sec)
					}
					if d.Served {
						served[i][w]++
					}
				}
			}()
		}
	}
	wg.Wait()
	got := p.Seconds()
	for i, sec := range seconds {
		total := 0
		for _, n := range served[i] {
			total += n
		}
		want := testSchedule().Capacity(sec)
		if total != want {
			t.Errorf("second %d: served %d, want exactly %d", sec, total, want)
		}
		s := got[sec]
		if s.Arrivals != workers*perWorker || s.Served != int64(want) || s.FirstAttempts != workers*((perWorker+1)/2) {
			t.Errorf("second %d: counters %+v, want arrivals %d served %d first %d", sec, s, workers*perWorker, want, workers*((perWorker+1)/2))
		}
	}
	for sec, s := range got {
		if s.Arrivals != 0 && !contains(seconds, sec) {
			t.Errorf("second %d has %d arrivals, want none", sec, s.Arrivals)
		}
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// The arrival numbered n is served iff n <= capacity: arrivals are served
// first come, first served, in each second.
func TestPartnerAdmitFirstComeFirstServed(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: Schedule{Normal: 3, Outage: 1, OutageStart: time.Second, OutageLength: time.Second}, Seconds: 3, RejectStatus: 429})
	var got []bool
	for i := 0; i < 5; i++ {
		got = append(got, p.Admit(testStart.Add(time.Duration(i)*100*time.Millisecond), true).Served)
	}
	for i := 0; i < 3; i++ {
		got = append(got, p.Admit(testStart.Add(time.Second+time.Duration(i)*time.Millisecond), false).Served)
	}
	want := []bool{true, true, true, false, false, true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("served = %v, want %v", got, want)
		}
	}
}

// With Schedule.Slot, each slot of a second serves its share of the
// second's capacity, first come first served: calls that bunch up in one
// slot are turned away though the second stays under its capacity.
func TestPartnerAdmitPerSlot(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: Schedule{Normal: 20, Outage: 5, OutageStart: time.Second, OutageLength: time.Second, Slot: 100 * time.Millisecond}, Seconds: 3, RejectStatus: 429})
	var got []bool
	// Second 0: 2 per 100 ms. Three arrive in its first slot, one in its
	// second: 3 of 4 served, where a per-second limit of 20 serves all.
	for _, at := range []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 150 * time.Millisecond} {
		got = append(got, p.Admit(testStart.Add(at), true).Served)
	}
	// Second 1 (the outage): 5/s rounds to 1 per 100 ms (0.5, half away
	// from zero).
	for _, at := range []time.Duration{time.Second, time.Second + time.Millisecond, time.Second + 900*time.Millisecond} {
		got = append(got, p.Admit(testStart.Add(at), true).Served)
	}
	want := []bool{true, true, false, true, true, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("served = %v, want %v", got, want)
		}
	}
	secs := p.Seconds()
	if secs[0].Arrivals != 4 || secs[0].Served != 3 || secs[1].Arrivals != 3 || secs[1].Served != 2 {
		t.Fatalf("seconds %+v, want 3 of 4 and 2 of 3 served", secs[:2])
	}
}

// Arrivals before second 0 count in second 0, arrivals after the last kept
// second in the last one; the capacity applied is that second's.
func TestPartnerSecondClamping(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: Schedule{Normal: 1, Outage: 0, OutageStart: 2 * time.Second, OutageLength: time.Second}, Seconds: 3, RejectStatus: 503})
	if d := p.Admit(testStart.Add(-time.Second), true); d.Second != 0 || !d.Served {
		t.Errorf("early arrival: %+v, want second 0 served", d)
	}
	if d := p.Admit(testStart.Add(time.Hour), true); d.Second != 2 || d.Served {
		t.Errorf("late arrival: %+v, want second 2 (capacity 0) rejected", d)
	}
}

func TestPartnerSlowdown(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{
		Schedule: Schedule{Normal: 2, Outage: 0, OutageStart: time.Second, OutageLength: time.Second},
		Seconds:  2, RejectStatus: 503, Latency: 10 * time.Millisecond, Slowdown: 100 * time.Millisecond,
	})
	want := []time.Duration{10, 10, 60, 110, 160} // ms: overload (n/2 - 1) × 100 ms on top of 10 ms
	for i, w := range want {
		if d := p.Admit(testStart, true); d.Latency != w*time.Millisecond {
			t.Errorf("arrival %d: latency %v, want %v", i+1, d.Latency, w*time.Millisecond)
		}
	}
	// Capacity 0: the overload counts as the maximum, 10.
	if d := p.Admit(testStart.Add(time.Second), true); d.Latency != 10*time.Millisecond+10*100*time.Millisecond {
		t.Errorf("zero capacity: latency %v", d.Latency)
	}
}

func TestPartnerServeHTTP(t *testing.T) {
	for _, status := range []int{503, 429} {
		p := newTestPartner(t, PartnerConfig{
			Schedule: Schedule{Normal: 1, Outage: 1, OutageStart: 0, OutageLength: time.Second},
			Seconds:  1, RejectStatus: status, RetryAfter: 1500 * time.Millisecond,
		})
		srv := httptest.NewServer(p)
		var codes []int
		for i, attempt := range []string{"1", "2", "1"} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set(AttemptHeader, attempt)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
			if i > 0 {
				if ra, amz := resp.Header.Get("Retry-After"), resp.Header.Get("X-Amz-Retry-After"); ra != "2" || amz != "1500" {
					t.Errorf("status %d: Retry-After %q, X-Amz-Retry-After %q; want \"2\" (rounded up) and \"1500\"", status, ra, amz)
				}
			}
		}
		srv.Close()
		if codes[0] != 200 || codes[1] != status || codes[2] != status {
			t.Errorf("codes %v, want [200 %d %d]", codes, status, status)
		}
		if s := p.Seconds()[0]; s.Arrivals != 3 || s.FirstAttempts != 2 || s.Served != 1 {
			t.Errorf("counters %+v, want 3 arrivals, 2 first attempts, 1 served", s)
		}
	}
}

func TestPartnerNoRetryAfter(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: Schedule{}, Seconds: 1, RejectStatus: 503})
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "" || rec.Header().Get("X-Amz-Retry-After") != "" {
		t.Errorf("got %d with headers %v, want 503 without Retry-After", rec.Code, rec.Header())
	}
}

func TestNewPartnerValidates(t *testing.T) {
	clock, _ := NewClock(testStart, 1)
	ok := PartnerConfig{Schedule: testSchedule(), Seconds: 60, RejectStatus: 503}
	for name, mut := range map[string]func(*PartnerConfig){
		"Seconds":      func(c *PartnerConfig) { c.Seconds = 0 },
		"RejectStatus": func(c *PartnerConfig) { c.RejectStatus = 500 },
		"RetryAfter":   func(c *PartnerConfig) { c.RetryAfter = -1 },
		"Latency":      func(c *PartnerConfig) { c.Latency = -1 },
		"Slowdown":     func(c *PartnerConfig) { c.Slowdown = -1 },
		"outage start": func(c *PartnerConfig) { c.Schedule.OutageStart = time.Millisecond },
	} {
		c := ok
		mut(&c)
		_, err := NewPartner(clock, testStart, c)
		if err == nil || !strings.Contains(err.Error(), strings.Fields(name)[0]) && !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v does not name it", name, err)
		}
	}
	if _, err := NewPartner(clock, testStart, ok); err != nil {
		t.Error(err)
	}
}

// In process, the partner answers as it does over HTTP: the status, the
// Retry-After headers, and its latency slept on the clock.
func TestPartnerAnswerInProcess(t *testing.T) {
	clock := newManualClock()
	p, err := NewInprocPartner(clock, testStart, PartnerConfig{
		Schedule: Schedule{Normal: 1, Outage: 1, OutageStart: 0, OutageLength: time.Second},
		Seconds:  1, RejectStatus: 429, RetryAfter: 1500 * time.Millisecond, Latency: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := p.Answer(context.Background(), true, testStart)
	if err != nil || ok.StatusCode != 200 || ok.Header.Get("Retry-After") != "" {
		t.Fatalf("first call: %+v, %v; want 200", ok, err)
	}
	rejected, err := p.Answer(context.Background(), false, testStart)
	if err != nil || rejected.StatusCode != 429 || rejected.Header.Get("Retry-After") != "2" || rejected.Header.Get("X-Amz-Retry-After") != "1500" {
		t.Fatalf("second call: %+v, %v; want 429 with Retry-After 2 and X-Amz-Retry-After 1500", rejected, err)
	}
	if got := slept(clock); len(got) != 2 || got[0] != 20*time.Millisecond || got[1] != 20*time.Millisecond {
		t.Errorf("slept %v, want the latency twice", got)
	}
	// The second call arrived 20 ms after it was due (the first's latency).
	if lag := p.Lag(); lag.Measured != 2 || lag.FirstMeasured != 1 || lag.Late != 0 || time.Duration(lag.Max) != 20*time.Millisecond {
		t.Errorf("lag %+v, want 2 measured, 1 first, none late, max 20ms", lag)
	}
	if _, err := p.Answer(canceled(), true, testStart); err == nil {
		t.Error("a canceled call was answered")
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// The partner counts arrivals and rejections per SlotLength, and how late
// attempts arrive after the due time their header carries.
func TestPartnerSlotsAndLag(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: Schedule{Normal: 2, Outage: 2, OutageStart: 0, OutageLength: time.Second}, Seconds: 2, RejectStatus: 503})
	for i, at := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 1050 * time.Millisecond} {
		p.Admit(testStart.Add(at), i == 0)
		p.RecordLag(testStart.Add(at), testStart.Add(at-time.Duration(i)*60*time.Millisecond), i == 0)
	}
	slots := p.Slots()
	if len(slots) != 20 {
		t.Fatalf("%d slots for 2 s, want 20", len(slots))
	}
	// Second 0: arrivals 1 and 2 served, arrival 3 (at 150 ms) rejected.
	if slots[0] != (Slot{Arrivals: 2}) || slots[1] != (Slot{Arrivals: 1, Rejected: 1}) || slots[10] != (Slot{Arrivals: 1}) {
		t.Errorf("slots %v", slots)
	}
	// Lags 0, 60, 120 and 180 ms: two over LateAfter, none of them first.
	if lag := p.Lag(); lag.Measured != 4 || lag.FirstMeasured != 1 || lag.Late != 2 || lag.LateFirst != 0 || time.Duration(lag.Max) != 180*time.Millisecond {
		t.Errorf("lag %+v", lag)
	}
}

// A first attempt that arrives after its second ends counts in
// FirstAttempts of the second it arrived in and in FirstAttemptsByDue of
// the second it was due in; a retry counts in neither.
func TestPartnerFirstAttemptsByDue(t *testing.T) {
	p := newTestPartner(t, PartnerConfig{Schedule: Schedule{Normal: 10, Outage: 10, OutageStart: 0, OutageLength: time.Second}, Seconds: 2, RejectStatus: 503})
	for _, a := range []struct {
		due, at time.Duration
		first   bool
	}{
		{100 * time.Millisecond, 110 * time.Millisecond, true},   // on time
		{950 * time.Millisecond, 1020 * time.Millisecond, true},  // late, into second 1
		{900 * time.Millisecond, 1500 * time.Millisecond, false}, // a retry
	} {
		p.Admit(testStart.Add(a.at), a.first)
		p.RecordLag(testStart.Add(a.at), testStart.Add(a.due), a.first)
	}
	secs := p.Seconds()
	want := []Second{
		{Arrivals: 1, FirstAttempts: 1, FirstAttemptsByDue: 2, Served: 1},
		{Arrivals: 2, FirstAttempts: 1, FirstAttemptsByDue: 0, Served: 2},
	}
	for i, w := range want {
		if secs[i] != w {
			t.Errorf("second %d: %+v, want %+v", i, secs[i], w)
		}
	}
}
