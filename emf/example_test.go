package emf_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/herdguard/herdguard/budget"
	"github.com/herdguard/herdguard/emf"
	"github.com/herdguard/herdguard/retry"
)

// A Recorder on an Executor's hooks: one retry granted, then the flush at
// the end of the invocation writes one EMF line, with the service as a
// dimension and the metadata as log fields.
func ExampleNew() {
	rec, err := emf.New(os.Stdout, emf.Options{
		Namespace:  "Herdguard",
		Service:    "bikes",
		Dimensions: map[string]string{"FunctionName": "bikes-fn", "Partner": "payments"},
		Metadata:   map[string]any{"Region": "eu-central-1"},
		Now:        func() time.Time { return time.UnixMilli(1_800_000_000_000) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := retry.Config{Idempotent: true, TransientBase: time.Millisecond}
	rec.Instrument(&cfg, nil)
	exec, err := retry.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = exec.Do(context.Background(), func(_ context.Context, attempt int) error {
		if attempt == 1 {
			return &retry.StatusError{StatusCode: 503}
		}
		return nil
	})
	if err := rec.Flush(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"FunctionName":"bikes-fn","Partner":"payments","Region":"eu-central-1","Retries":1,"_aws":{"CloudWatchMetrics":[{"Namespace":"Herdguard","Dimensions":[["FunctionName","Partner","service"]],"Metrics":[{"Name":"Retries","Unit":"Count"}]}],"Timestamp":1800000000000},"service":"bikes"}
}

// New checks names and values as CloudWatch does: a namespace may not
// start with ':', and a dimension value may not hold a newline.
func ExampleNew_invalid() {
	_, err := emf.New(os.Stdout, emf.Options{Namespace: ":Partner"})
	fmt.Println(errors.Is(err, emf.ErrInvalid), err)
	_, err = emf.New(os.Stdout, emf.Options{Namespace: "Herdguard",
		Dimensions: map[string]string{"Partner": "pay\nments"}})
	fmt.Println(errors.Is(err, emf.ErrInvalid), err)
	// Output:
	// true herdguard: emf.Options.Namespace ":Partner" starts with ':'
	// true herdguard: emf.Options.Dimensions["Partner"] value "pay\nments" has a control character ('\n') at byte 3; want printable ASCII
}

// Store faults are metrics of their own: a fleet-wide budget that fails
// closed refuses the retry when its table cannot be reached, and the
// flush counts a BudgetStoreErrors, not a BudgetExhausted.
func ExampleRecorder_Instrument_storeFault() {
	rec, _ := emf.New(os.Stdout, emf.Options{Namespace: "Herdguard",
		Dimensions: map[string]string{"Partner": "payments"},
		Now:        func() time.Time { return time.UnixMilli(1_800_000_000_000) }})
	down := budgetStoreFunc(func() error { return errors.New("dial tcp: connection refused") })
	global, _ := budget.NewGlobal(down, "payments", budget.GlobalConfig{})
	cfg := retry.Config{Idempotent: true, Budgets: []budget.Budget{global}}
	rec.Instrument(&cfg, nil)
	exec, _ := retry.New(cfg)
	err := exec.Do(context.Background(), func(context.Context, int) error { return &retry.StatusError{StatusCode: 503} })
	fmt.Println(errors.Is(err, budget.ErrExhausted), errors.Is(err, budget.ErrUnavailable))
	_ = rec.Flush()
	// Output:
	// true true
	// {"BudgetStoreErrors":1,"Partner":"payments","_aws":{"CloudWatchMetrics":[{"Namespace":"Herdguard","Dimensions":[["Partner"]],"Metrics":[{"Name":"BudgetStoreErrors","Unit":"Count"}]}],"Timestamp":1800000000000}}
}
