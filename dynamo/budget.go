package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/herdguard/herdguard/budget"

	"github.com/herdguard/herdguard/internal/layout"
)

// BudgetStore is a budget.Store in a DynamoDB table: every Apply is one
// conditional UpdateItem on the window shard's item. It is safe for
// concurrent use and holds no lock.
type BudgetStore struct {
	api      API
	table    string
	cfg      StoreOptions
	counters counters
}

var _ budget.Store = (*BudgetStore)(nil)

// NewBudgetStore returns a store that keeps budget allowances in table,
// which must have the layout CreateTable creates. A nil api or a table
// name DynamoDB would reject is a *herdguard.ConfigError.
func NewBudgetStore(api API, table string, o StoreOptions) (*BudgetStore, error) {
	if err := checkStoreArgs("NewBudgetStore", api, table); err != nil {
		return nil, err
	}
	return &BudgetStore{api: api, table: table, cfg: o}, nil
}

// Stats returns the store's cumulative request counts.
func (s *BudgetStore) Stats() Stats { return s.counters.stats() }

// Apply performs u on the item for k with one conditional UpdateItem: the
// allowance (Floor if the item is new) plus Deposit minus Take, applied only
// if the result is not negative. A refusal returns the allowance as it
// stands with budget.ErrInsufficient, at no extra read.
//
// A malformed allowance never funds a retry: Apply returns a
// *MalformedItemError, and the item stays malformed until someone repairs it
// or its window expires. (A fraction in range, such as 10.5, passes the
// condition, so that update is applied before the error is reported.)
//
// Any other error (timeout, throttling, invalid arguments) is returned with
// context; the update may or may not have been applied. See "DynamoDB item
// layout" in docs/ARCHITECTURE.md for the expression.
func (s *BudgetStore) Apply(ctx context.Context, k budget.Key, u budget.Update) (int64, error) {
	key, err := budgetKey(k)
	if err != nil {
		return 0, fmt.Errorf("herdguard: dynamo: budget store: %w", err)
	}
	expr, err := applyExpression(u)
	if err != nil {
		return 0, fmt.Errorf("herdguard: dynamo: budget %s: %w", k, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("herdguard: dynamo: budget %s: %w", k, err)
	}
	out, err := conditionalUpdate(ctx, s.api, s.table, &s.counters, s.cfg.OnRequest, key, expr)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return 0, fmt.Errorf("herdguard: dynamo: budget %s: UpdateItem: %w", k, err)
		}
		// Refused: the item as it stands came with the exception.
		old, err := allowanceOf(key, ccf.Item, u.Floor)
		if err != nil {
			return 0, s.counters.countMalformed(err)
		}
		if u.Take <= u.Deposit {
			// Only the type check can refuse such an update, and the item
			// passed it: DynamoDB and this code disagree.
			return 0, fmt.Errorf("herdguard: dynamo: budget %s: an update that cannot go negative was refused (allowance %d)", k, old)
		}
		return old, fmt.Errorf("herdguard: dynamo: budget %s holds %d, the update needs %d: %w", k, old, u.Take-u.Deposit, budget.ErrInsufficient)
	}
	now, err := allowanceOf(key, out.Attributes, -1)
	if err != nil {
		return 0, s.counters.countMalformed(err)
	}
	return now, nil
}

// applyExpression builds the update and condition of Apply.
func applyExpression(u budget.Update) (expression.Expression, error) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"Floor", u.Floor}, {"Deposit", u.Deposit}, {"Take", u.Take}} {
		if f.v < 0 || f.v > maxAmount {
			return expression.Expression{}, fmt.Errorf("update %s is %d, want [0, %d]", f.name, f.v, maxAmount)
		}
	}
	exp, err := ttlSeconds("update Expires", u.Expires)
	if err != nil {
		return expression.Expression{}, err
	}
	allowance := expression.Name(layout.AttrAllowance)
	update := expression.
		Set(allowance, expression.Plus(allowance.IfNotExists(numberValue(u.Floor)), numberValue(u.Deposit-u.Take))).
		Set(expression.Name(layout.AttrExpires), numberValue(exp))

	// The stored allowance must cover need and be a sane number: a value
	// of another type, or outside [0, 2^53], fails the condition, so
	// that the refusal brings the item back and it is reported as
	// malformed instead of being granted from. A fraction in range passes
	// (no condition can test for a whole number); decoding the new value
	// reports it. A missing allowance stands for the floor.
	need := u.Take - u.Deposit
	cond := allowance.Between(numberValue(max(need, 0)), numberValue(maxAmount))
	if u.Floor >= need {
		cond = expression.Or(allowance.AttributeNotExists(), cond)
	}
	expr, err := expression.NewBuilder().WithUpdate(update).WithCondition(cond).Build()
	if err != nil {
		return expression.Expression{}, fmt.Errorf("building the update expression: %w", err)
	}
	return expr, nil
}

// allowanceOf decodes a budget item's allowance. A missing item or
// attribute stands for floor; floor < 0 means the attribute must be there
// (the item was just written).
func allowanceOf(key string, attrs map[string]types.AttributeValue, floor int64) (int64, error) {
	it := item{key: key, attrs: attrs}
	v, ok, err := it.int64In(layout.AttrAllowance, 0, maxAmount)
	switch {
	case err != nil:
		return 0, err
	case !ok && floor < 0:
		return 0, it.malformed(layout.AttrAllowance, "is missing after an update")
	case !ok:
		return floor, nil
	}
	return v, nil
}

// numberValue is an expression value holding the integer v.
func numberValue(v int64) expression.ValueBuilder {
	return expression.Value(&types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)})
}

// stringValue is an expression value holding the string v.
func stringValue(v string) expression.ValueBuilder {
	return expression.Value(&types.AttributeValueMemberS{Value: v})
}

// keyAttr is the key of the item whose partition key is pk.
func keyAttr(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{layout.AttrPK: &types.AttributeValueMemberS{Value: pk}}
}
