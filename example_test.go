package herdguard_test

import (
	"errors"
	"fmt"

	"github.com/herdguard/herdguard"
	"github.com/herdguard/herdguard/breaker"
)

// Every constructor rejects bad input with a *herdguard.ConfigError that
// names the field, qualified by its package and type.
func ExampleConfigError() {
	_, err := breaker.New("partner", breaker.Settings{FailureRatio: 1.5})
	var ce *herdguard.ConfigError
	if errors.As(err, &ce) {
		fmt.Println(ce.Field)
	}
	// Output: breaker.Settings.FailureRatio
}
