package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// conditionalUpdate sends the one kind of write both stores make for their
// conditional changes: an UpdateItem of key with expr that returns the item
// after the update (ALL_NEW) or, when the condition fails, the item as it
// stood on the ConditionalCheckFailedException (ALL_OLD, at no extra cost).
// It counts the request in c and reports it to hook.
func conditionalUpdate(ctx context.Context, api API, table string, c *counters, hook func(RequestInfo), key string, expr expression.Expression) (*dynamodb.UpdateItemOutput, error) {
	done := c.instrument(hook, opWrite, "UpdateItem", key)
	out, err := answer(api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 keyAttr(key),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
	}))
	err = markThrottled(err)
	if err == nil {
		c.consumed(opWrite, out.ConsumedCapacity)
	}
	done(err)
	return out, err
}
