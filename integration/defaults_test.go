package integration

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// Library defaults the tests reason with, as the packages document them.
const (
	defaultCacheTTL      = time.Second // breaker.Settings.CacheTTL
	defaultFaultCooldown = time.Second // budget.GlobalConfig.FaultCooldown
	defaultGlobalFloor   = 3           // budget.GlobalConfig.Floor
	defaultGlobalRatio   = 0.1         // budget.GlobalConfig.Ratio
	defaultGlobalWindow  = 10 * time.Second
)

// closeIdle closes the idle connections of a DynamoDB client made by
// dynamo.NewClient, for the goroutine leak checks. The client stays usable.
func closeIdle(c *dynamodb.Client) {
	if h, ok := c.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok {
		h.CloseIdleConnections()
	}
}

// maxAmount is the largest allowance the DynamoDB budget store accepts
// (2^53, as package dynamo documents it): beyond, an item is malformed.
const maxAmount = 1 << 53
