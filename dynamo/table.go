package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/herdguard/herdguard"
)

// maxTableWait bounds how long CreateTable and DeleteTable wait for the
// table to become active or to disappear, when ctx allows longer.
const maxTableWait = 5 * time.Minute

// Waiter poll delays: DynamoDB Local is ready at once, the service in
// seconds.
const (
	tableWaitMinDelay = 100 * time.Millisecond
	tableWaitMaxDelay = 5 * time.Second
)

// checkTableName applies DynamoDB's rules for table names, so that a typo
// is reported when a store is built rather than on its first call. It
// returns what is wrong, or "".
func checkTableName(table string) string {
	if len(table) < 3 || len(table) > 255 {
		return fmt.Sprintf("%q is %d characters long; DynamoDB table names have 3 to 255", table, len(table))
	}
	for i := 0; i < len(table); i++ {
		switch c := table[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return fmt.Sprintf("%q has a character %q at byte %d; DynamoDB allows letters, digits, '_', '-' and '.'", table, c, i)
		}
	}
	return ""
}

// CreateTable creates the table the stores use (see Spec): partition key
// "pk" (string), on-demand billing, time to live on "expires". It waits,
// within ctx and at most 5 minutes, until the table is active, then
// enables time to live. It is idempotent: an existing table with the right
// key is accepted (whatever its billing mode), and time to live already
// enabled on "expires" is left alone. An existing table with another key,
// or with time to live on another attribute, is an error.
//
// It is meant for tests and local development; deployments create the
// table from template.yaml.
func CreateTable(ctx context.Context, api TableAPI, table string) error {
	if api == nil {
		return &herdguard.ConfigError{Field: "dynamo.CreateTable api", Reason: "is nil"}
	}
	if msg := checkTableName(table); msg != "" {
		return &herdguard.ConfigError{Field: "dynamo.CreateTable table", Reason: msg}
	}
	spec := Spec()
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: spec.BillingMode,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(spec.PartitionKey), AttributeType: spec.PartitionKeyType},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(spec.PartitionKey), KeyType: types.KeyTypeHash},
		},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("herdguard: dynamo: CreateTable %q: %w", table, err)
	}

	waiter := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = tableWaitMinDelay, tableWaitMaxDelay
	})
	desc, err := waiter.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, waitBound(ctx))
	if err != nil {
		return fmt.Errorf("herdguard: dynamo: CreateTable %q: waiting for the table to become active: %w", table, err)
	}
	if err := checkKeySchema(desc.Table, spec); err != nil {
		return fmt.Errorf("herdguard: dynamo: CreateTable %q: %w", table, err)
	}
	if err := enableTTL(ctx, api, table, spec.TTLAttribute); err != nil {
		return fmt.Errorf("herdguard: dynamo: CreateTable %q: %w", table, err)
	}
	return nil
}

// waitBound is the longest a waiter may wait: maxTableWait, or less if ctx
// ends sooner.
func waitBound(ctx context.Context) time.Duration {
	d := maxTableWait
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			d = max(left, time.Millisecond)
		}
	}
	return d
}

// checkKeySchema reports whether an existing table is keyed as spec says.
func checkKeySchema(t *types.TableDescription, spec TableSpec) error {
	if t == nil {
		return errors.New("DescribeTable returned no table description")
	}
	if len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != spec.PartitionKey || t.KeySchema[0].KeyType != types.KeyTypeHash {
		return fmt.Errorf("the table exists with another key schema %s; want only the hash key %q", describeKeys(t.KeySchema), spec.PartitionKey)
	}
	for _, d := range t.AttributeDefinitions {
		if aws.ToString(d.AttributeName) == spec.PartitionKey && d.AttributeType != spec.PartitionKeyType {
			return fmt.Errorf("the table's key %q has type %s, want %s", spec.PartitionKey, d.AttributeType, spec.PartitionKeyType)
		}
	}
	return nil
}

func describeKeys(ks []types.KeySchemaElement) string {
	s := "["
	for i, k := range ks {
		if i > 0 {
			s += " "
		}
		s += aws.ToString(k.AttributeName) + ":" + string(k.KeyType)
	}
	return s + "]"
}

// enableTTL turns time to live on for attr unless it is on already.
func enableTTL(ctx context.Context, api TableAPI, table, attr string) error {
	on, err := ttlEnabled(ctx, api, table, attr)
	if err != nil || on {
		return err
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attr),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		// Another CreateTable may have enabled it since we looked; DynamoDB
		// then answers with a ValidationException.
		if on, derr := ttlEnabled(ctx, api, table, attr); derr == nil && on {
			return nil
		}
		return fmt.Errorf("enabling time to live on %q: %w", attr, err)
	}
	return nil
}

// ttlEnabled reports whether time to live is enabled (or being enabled) on
// attr, and fails if it is on another attribute or being disabled.
func ttlEnabled(ctx context.Context, api TableAPI, table, attr string) (bool, error) {
	out, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return false, fmt.Errorf("describing time to live: %w", err)
	}
	d := out.TimeToLiveDescription
	if d == nil {
		return false, nil
	}
	switch d.TimeToLiveStatus {
	case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
		if got := aws.ToString(d.AttributeName); got != attr {
			return false, fmt.Errorf("time to live is on attribute %q, want %q", got, attr)
		}
		return true, nil
	case types.TimeToLiveStatusDisabling:
		return false, fmt.Errorf("time to live is being disabled; DynamoDB allows enabling it again only once that is done (up to an hour)")
	default:
		return false, nil
	}
}

// DeleteTable deletes the table and waits, within ctx and at most
// 5 minutes, until it is gone. A table that does not exist is not an
// error. It is meant for tests.
func DeleteTable(ctx context.Context, api TableAPI, table string) error {
	if api == nil {
		return &herdguard.ConfigError{Field: "dynamo.DeleteTable api", Reason: "is nil"}
	}
	if msg := checkTableName(table); msg != "" {
		return &herdguard.ConfigError{Field: "dynamo.DeleteTable table", Reason: msg}
	}
	_, err := api.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("herdguard: dynamo: DeleteTable %q: %w", table, err)
	}
	waiter := dynamodb.NewTableNotExistsWaiter(api, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = tableWaitMinDelay, tableWaitMaxDelay
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, waitBound(ctx)); err != nil {
		return fmt.Errorf("herdguard: dynamo: DeleteTable %q: waiting for the table to disappear: %w", table, err)
	}
	return nil
}
