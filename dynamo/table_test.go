package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// fakeTableAPI scripts the table administration calls; it records the
// operations made.
type fakeTableAPI struct {
	create   func(*dynamodb.CreateTableInput) error
	delete   func() error
	describe func(n int) (*types.TableDescription, error) // n counts DescribeTable calls from 1
	ttl      func(n int) *types.TimeToLiveDescription     // n counts DescribeTimeToLive calls from 1
	updTTL   func(*dynamodb.UpdateTimeToLiveInput) error

	ops                     []string
	describes, ttlDescribes int
}

func (f *fakeTableAPI) CreateTable(_ context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	f.ops = append(f.ops, "CreateTable")
	return &dynamodb.CreateTableOutput{}, f.create(in)
}

func (f *fakeTableAPI) DeleteTable(context.Context, *dynamodb.DeleteTableInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteTableOutput, error) {
	f.ops = append(f.ops, "DeleteTable")
	return &dynamodb.DeleteTableOutput{}, f.delete()
}

func (f *fakeTableAPI) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	f.ops = append(f.ops, "DescribeTable")
	f.describes++
	d, err := f.describe(f.describes)
	if err != nil {
		return nil, err
	}
	return &dynamodb.DescribeTableOutput{Table: d}, nil
}

func (f *fakeTableAPI) DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	f.ops = append(f.ops, "DescribeTimeToLive")
	f.ttlDescribes++
	return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: f.ttl(f.ttlDescribes)}, nil
}

func (f *fakeTableAPI) UpdateTimeToLive(_ context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	f.ops = append(f.ops, "UpdateTimeToLive")
	return &dynamodb.UpdateTimeToLiveOutput{}, f.updTTL(in)
}

func activeTable(key string, typ types.ScalarAttributeType) *types.TableDescription {
	return &types.TableDescription{
		TableStatus:          types.TableStatusActive,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(key), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: typ}},
	}
}

func ttlOn(attr string, status types.TimeToLiveStatus) func(int) *types.TimeToLiveDescription {
	return func(int) *types.TimeToLiveDescription {
		return &types.TimeToLiveDescription{AttributeName: aws.String(attr), TimeToLiveStatus: status}
	}
}

var errInUse = &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "CreateTable", Err: &types.ResourceInUseException{Message: aws.String("Cannot create preexisting table")}}

func TestCreateTableFresh(t *testing.T) {
	var created *dynamodb.CreateTableInput
	var ttl *dynamodb.UpdateTimeToLiveInput
	f := &fakeTableAPI{
		create: func(in *dynamodb.CreateTableInput) error { created = in; return nil },
		describe: func(n int) (*types.TableDescription, error) {
			if n == 1 {
				d := activeTable("pk", types.ScalarAttributeTypeS)
				d.TableStatus = types.TableStatusCreating
				return d, nil
			}
			return activeTable("pk", types.ScalarAttributeTypeS), nil
		},
		ttl:    ttlOn("", types.TimeToLiveStatusDisabled),
		updTTL: func(in *dynamodb.UpdateTimeToLiveInput) error { ttl = in; return nil },
	}
	if err := CreateTable(t.Context(), f, "herdguard"); err != nil {
		t.Fatal(err)
	}
	if aws.ToString(created.TableName) != "herdguard" || created.BillingMode != types.BillingModePayPerRequest ||
		len(created.KeySchema) != 1 || aws.ToString(created.KeySchema[0].AttributeName) != "pk" || created.KeySchema[0].KeyType != types.KeyTypeHash ||
		len(created.AttributeDefinitions) != 1 || created.AttributeDefinitions[0].AttributeType != types.ScalarAttributeTypeS {
		t.Errorf("CreateTable input %+v", created)
	}
	if aws.ToString(ttl.TimeToLiveSpecification.AttributeName) != "expires" || !aws.ToBool(ttl.TimeToLiveSpecification.Enabled) {
		t.Errorf("UpdateTimeToLive input %+v", ttl.TimeToLiveSpecification)
	}
	if got := strings.Join(f.ops, " "); got != "CreateTable DescribeTable DescribeTable DescribeTimeToLive UpdateTimeToLive" {
		t.Errorf("operations %s", got)
	}
}

func TestCreateTableExisting(t *testing.T) {
	f := &fakeTableAPI{
		create:   func(*dynamodb.CreateTableInput) error { return errInUse },
		describe: func(int) (*types.TableDescription, error) { return activeTable("pk", types.ScalarAttributeTypeS), nil },
		ttl:      ttlOn("expires", types.TimeToLiveStatusEnabled),
		updTTL: func(*dynamodb.UpdateTimeToLiveInput) error {
			t.Fatal("UpdateTimeToLive called although enabled")
			return nil
		},
	}
	if err := CreateTable(t.Context(), f, "herdguard"); err != nil {
		t.Fatal(err)
	}
}

func TestCreateTableTTLRace(t *testing.T) {
	// Another CreateTable enables time to live between our look and our
	// update; DynamoDB then refuses ours.
	f := &fakeTableAPI{
		create:   func(*dynamodb.CreateTableInput) error { return errInUse },
		describe: func(int) (*types.TableDescription, error) { return activeTable("pk", types.ScalarAttributeTypeS), nil },
		ttl: func(n int) *types.TimeToLiveDescription {
			if n == 1 {
				return &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusDisabled}
			}
			return &types.TimeToLiveDescription{AttributeName: aws.String("expires"), TimeToLiveStatus: types.TimeToLiveStatusEnabling}
		},
		updTTL: func(*dynamodb.UpdateTimeToLiveInput) error {
			return &smithy.GenericAPIError{Code: "ValidationException", Message: "TimeToLive is already enabled"}
		},
	}
	if err := CreateTable(t.Context(), f, "herdguard"); err != nil {
		t.Fatal(err)
	}
}

func TestCreateTableRefuses(t *testing.T) {
	ok := func(int) (*types.TableDescription, error) { return activeTable("pk", types.ScalarAttributeTypeS), nil }
	denied := errors.New("AccessDeniedException: not authorized")
	for _, c := range []struct {
		name     string
		create   error
		describe func(int) (*types.TableDescription, error)
		ttl      func(int) *types.TimeToLiveDescription
		updTTL   error
		want     string
	}{
		{"create denied", denied, ok, nil, nil, "not authorized"},
		{"other key", errInUse, func(int) (*types.TableDescription, error) { return activeTable("id", types.ScalarAttributeTypeS), nil }, nil, nil, "key schema"},
		{"numeric key", errInUse, func(int) (*types.TableDescription, error) { return activeTable("pk", types.ScalarAttributeTypeN), nil }, nil, nil, "has type N"},
		{"composite key", errInUse, func(int) (*types.TableDescription, error) {
			d := activeTable("pk", types.ScalarAttributeTypeS)
			d.KeySchema = append(d.KeySchema, types.KeySchemaElement{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange})
			return d, nil
		}, nil, nil, "key schema"},
		{"describe fails", nil, func(int) (*types.TableDescription, error) { return nil, denied }, nil, nil, "not authorized"},
		{"ttl on another attribute", errInUse, ok, ttlOn("ttl", types.TimeToLiveStatusEnabled), nil, `"ttl"`},
		{"ttl being disabled", errInUse, ok, ttlOn("expires", types.TimeToLiveStatusDisabling), nil, "being disabled"},
		{"ttl update fails", errInUse, ok, ttlOn("", types.TimeToLiveStatusDisabled), denied, "not authorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeTableAPI{
				create:   func(*dynamodb.CreateTableInput) error { return c.create },
				describe: c.describe,
				ttl:      c.ttl,
				updTTL:   func(*dynamodb.UpdateTimeToLiveInput) error { return c.updTTL },
			}
			err := CreateTable(t.Context(), f, "herdguard")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"herdguard"`) {
				t.Fatalf("CreateTable = %v, want an error naming the table and containing %q", err, c.want)
			}
		})
	}
	if err := CreateTable(t.Context(), nil, "herdguard"); err == nil {
		t.Error("CreateTable(nil api): no error")
	}
	if err := CreateTable(t.Context(), &fakeTableAPI{}, "no"); err == nil {
		t.Error("CreateTable(table \"no\"): no error")
	}
}

func TestDeleteTable(t *testing.T) {
	notFound := &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "DescribeTable", Err: &types.ResourceNotFoundException{Message: aws.String("not found")}}
	f := &fakeTableAPI{
		delete: func() error { return nil },
		describe: func(n int) (*types.TableDescription, error) {
			if n == 1 {
				d := activeTable("pk", types.ScalarAttributeTypeS)
				d.TableStatus = types.TableStatusDeleting
				return d, nil
			}
			return nil, notFound
		},
	}
	if err := DeleteTable(t.Context(), f, "herdguard"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.ops, " "); got != "DeleteTable DescribeTable DescribeTable" {
		t.Errorf("operations %s", got)
	}
	gone := &fakeTableAPI{delete: func() error { return notFound }}
	if err := DeleteTable(t.Context(), gone, "herdguard"); err != nil {
		t.Errorf("DeleteTable of a missing table = %v, want nil", err)
	}
	denied := &fakeTableAPI{delete: func() error { return errors.New("AccessDeniedException") }}
	if err := DeleteTable(t.Context(), denied, "herdguard"); err == nil {
		t.Error("DeleteTable denied: no error")
	}
}
