package breaker

import (
	"context"
	"time"
)

// Store shares a breaker's state between processes: every execution
// environment of a fleet that names the same breaker sees one state. The
// Breaker decides; the Store only persists, with conditional writes.
//
// Implementations are safe for concurrent use, honour ctx (a Breaker gives
// each call a short timeout of its own), never hold a lock across network
// I/O, and return errors satisfying errors.Is(err, ErrStore) for every
// fault that is not a domain answer (ErrConflict, ErrProbeDenied), and
// also ErrThrottled for a request refused for capacity, nothing applied. A
// Store never panics on malformed data: it returns ErrStore.
//
// Package local has an in-memory Store (for tests and one-process fleets);
// package dynamo has a DynamoDB one; package breakertest is the conformance
// suite both pass.
type Store interface {
	// Load returns the shared state, override included. A breaker that was
	// never written reads as the zero Snapshot (Closed, epoch 0).
	Load(ctx context.Context, name string) (Snapshot, error)

	// Report adds one environment's sampled counts to the fleet's counts
	// for bucket r.Bucket, kept in slot r.Bucket mod FleetSlots of the
	// state, and returns the state after it. It is one conditional write
	// (a store may need more when its guess of what the slot holds was
	// wrong):
	//
	//   - if the stored epoch is not r.Epoch, nothing is applied and it
	//     returns the current snapshot with an error satisfying
	//     errors.Is(err, ErrConflict): counts never cross a transition;
	//   - otherwise, if the slot holds bucket r.Bucket the counts are added
	//     to it; if it holds an older bucket (or none) it is replaced by
	//     r's counts; if it holds a newer one the counts are dropped (a late
	//     report);
	//   - and in every case but a conflict, a non-zero r.WatchUntil is
	//     stored as the fleet's WatchUntil.
	//
	// A breaker that was never written is created, closed at epoch 0.
	// Report's answer carries no override: Override and OverrideUntil are
	// zero in the snapshot it returns, on success and on a conflict alike,
	// since reading the override item would cost a read per report. The
	// Breaker keeps the override it last loaded. r.Bucket must be at least
	// 1 and the counts not negative; other input is refused with an error
	// satisfying errors.Is(err, ErrStore), nothing applied.
	Report(ctx context.Context, name string, r Report) (Snapshot, error)

	// Transition replaces the state with next if and only if the stored
	// epoch is still prevEpoch (a breaker that was never written has epoch
	// 0). next.Epoch must be prevEpoch+1. It empties every bucket of fleet
	// counts, keeps WatchUntil, and leaves the override alone. On
	// success it returns the stored snapshot; when the epoch has moved it
	// returns the current snapshot and an error satisfying
	// errors.Is(err, ErrConflict). Like Report's, Transition's answer
	// carries no override (Override and OverrideUntil are zero): the state
	// and the override are separate items, and reading the override after
	// the write would cost a read and a second way to fail after the
	// transition was stored. The Breaker keeps the override it last
	// loaded.
	Transition(ctx context.Context, name string, prevEpoch uint64, next Snapshot) (Snapshot, error)

	// AcquireProbe takes one of limit half-open probe slots for epoch, as a
	// lease that lapses at leaseUntil so that a probe lost with its
	// environment cannot wedge the breaker. A slot is free if it was never
	// taken, was taken in another epoch, or its lease lapsed before now.
	// It returns the slot taken, or ErrProbeDenied.
	AcquireProbe(ctx context.Context, name string, epoch uint64, limit int, now, leaseUntil time.Time) (slot int, err error)

	// SetOverride writes the operator's override (NoOverride clears it);
	// until, if not zero, is when it lapses. Operators can write the same
	// item by hand; see docs/ARCHITECTURE.md.
	SetOverride(ctx context.Context, name string, o Override, until time.Time) error
}
