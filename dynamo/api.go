package dynamo

import (
	"context"
	"reflect"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/internal/layout"
)

// API is the part of the DynamoDB client the stores call at run time, with
// the SDK's exact method signatures: a *dynamodb.Client satisfies it, and so
// can a test fake or a wrapper that adds tracing.
//
// It is deliberately narrow. Actions derives the IAM actions a deployment
// must grant from these methods, so the policy in template.yaml cannot drift
// from the code. Every write is an UpdateItem: there is no PutItem, so a
// role that may not write override items needs only the one Deny that
// template.yaml carries (see OverrideKeyPattern).
type API interface {
	// BatchGetItem reads a breaker's state and override items in one
	// request (BreakerStore.Load).
	BatchGetItem(ctx context.Context, params *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	// UpdateItem performs every write: the conditional read-modify-writes
	// and BreakerStore.SetOverride.
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// TableAPI is the part of the DynamoDB client that CreateTable and
// DeleteTable call. It is needed at deployment or test time only, never by
// the stores.
type TableAPI interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DeleteTable(ctx context.Context, params *dynamodb.DeleteTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteTableOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, params *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, params *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// The SDK client satisfies both interfaces.
var (
	_ API      = (*dynamodb.Client)(nil)
	_ TableAPI = (*dynamodb.Client)(nil)
)

// Actions returns the IAM actions the stores call at run time, sorted, such
// as "dynamodb:UpdateItem". It is derived from the methods of API, so a
// least-privilege policy built from it grants exactly what the code uses.
func Actions() []string { return actions(reflect.TypeFor[API]()) }

// TableActions returns the IAM actions CreateTable and DeleteTable call,
// sorted. Functions at run time do not need them.
func TableActions() []string { return actions(reflect.TypeFor[TableAPI]()) }

// actions lists "dynamodb:<Method>" for every method of the interface type t,
// in the (sorted) order reflect reports them.
func actions(t reflect.Type) []string {
	out := make([]string, 0, t.NumMethod())
	for i := range t.NumMethod() {
		out = append(out, "dynamodb:"+t.Method(i).Name)
	}
	return out
}

// TableSpec describes the one table both stores share. CreateTable creates
// it; template.yaml must declare the same (a test compares them).
type TableSpec struct {
	// PartitionKey is the name of the table's only key attribute.
	PartitionKey string
	// PartitionKeyType is its type: a string.
	PartitionKeyType types.ScalarAttributeType
	// TTLAttribute is the attribute DynamoDB's time to live reads (a number
	// of seconds since the Unix epoch). Expiry only cleans up: window items
	// are keyed by their window, so an expired item is never read again.
	TTLAttribute string
	// BillingMode is on-demand: the load follows partner outages, which are
	// spiky and rare.
	BillingMode types.BillingMode
}

// Spec returns the table's specification.
func Spec() TableSpec {
	return TableSpec{
		PartitionKey:     layout.AttrPK,
		PartitionKeyType: types.ScalarAttributeTypeS,
		TTLAttribute:     layout.AttrExpires,
		BillingMode:      types.BillingModePayPerRequest,
	}
}
