package dynamo_test

import (
	"fmt"
	"strings"

	"github.com/herdguard/herdguard/dynamo"
)

// The IAM actions a function using the stores needs on the table, for a
// least-privilege policy.
func ExampleActions() {
	fmt.Println(strings.Join(dynamo.Actions(), "\n"))
	// Output:
	// dynamodb:BatchGetItem
	// dynamodb:UpdateItem
}

// The table both stores share, as template.yaml must declare it.
func ExampleSpec() {
	s := dynamo.Spec()
	fmt.Printf("key %s (%s), TTL on %s, billing %s\n", s.PartitionKey, s.PartitionKeyType, s.TTLAttribute, s.BillingMode)
	// Output:
	// key pk (S), TTL on expires, billing PAY_PER_REQUEST
}
