package sim

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"

	"github.com/herdguard/herdguard/dynamo"
)

// DynamoBackend puts the global strategies' stores in a DynamoDB table (for
// example DynamoDB Local): one client (dynamo.NewClient) and one table for
// the process, fresh store instances (and counters) per strategy run. Each
// strategy names its budget and breaker after itself, so runs do not see
// each other's items.
type DynamoBackend struct {
	client  *dynamodb.Client
	table   string
	created bool // the backend created the table and deletes it on Close
	log     io.Writer
}

// NewDynamoBackend connects to cfg.DynamoEndpoint and creates the table:
// cfg.DynamoTable if set (an existing table with the right schema is
// reused and kept), otherwise a fresh "outagesim-<unix-ms>" that Close
// deletes. Static dummy credentials are used, as DynamoDB Local accepts
// any.
func NewDynamoBackend(ctx context.Context, cfg Config, log io.Writer) (*DynamoBackend, error) {
	// The SDK logs a warning for every response body it could not finish
	// reading, which is what a store call cut off by its short timeout
	// does; the stores count those failures (Stats.Errors), so silence it.
	awsCfg, err := config.LoadDefaultConfig(ctx,
		config.WithRegion(cfg.DynamoRegion),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("outagesim", "outagesim", "")),
		config.WithLogger(logging.Nop{}),
	)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	client, err := dynamo.NewClient(ctx, dynamo.ClientOptions{Config: &awsCfg, Endpoint: cfg.DynamoEndpoint})
	if err != nil {
		return nil, fmt.Errorf("dynamodb client: %w", err)
	}
	b := &DynamoBackend{client: client, table: cfg.DynamoTable, log: log}
	if b.table == "" {
		b.table = fmt.Sprintf("outagesim-%d", time.Now().UnixMilli())
		b.created = true
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := dynamo.CreateTable(cctx, client, b.table); err != nil {
		return nil, fmt.Errorf("dynamodb table %s: %w", b.table, err)
	}
	fmt.Fprintf(log, "outagesim: using DynamoDB table %s at %s\n", b.table, cfg.DynamoEndpoint)
	return b, nil
}

// Stores returns new DynamoDB stores over the backend's table, counting
// requests and capacity units (a BatchGetItem of a breaker's two items is
// one read request and 2 × 0.5 read units, eventually consistent; a
// GetItem 0.5; every write, refused or not, one write unit).
func (b *DynamoBackend) Stores(context.Context, func() time.Time) (Stores, error) {
	var readHalves, writes atomic.Int64
	onRequest := func(ri dynamo.RequestInfo) {
		switch ri.Operation {
		case "BatchGetItem":
			readHalves.Add(2)
		case "GetItem":
			readHalves.Add(1)
		case "UpdateItem", "PutItem", "DeleteItem":
			writes.Add(1) // items are under 1 KB: one unit, refused or not
		}
	}
	bs, err := dynamo.NewBudgetStore(b.client, b.table, dynamo.StoreOptions{OnRequest: onRequest})
	if err != nil {
		return Stores{}, err
	}
	cs, err := dynamo.NewBreakerStore(b.client, b.table, dynamo.StoreOptions{OnRequest: onRequest})
	if err != nil {
		return Stores{}, err
	}
	return Stores{
		Budget:  bs,
		Breaker: cs,
		Usage: func() StoreUsage {
			s1, s2 := bs.Stats(), cs.Stats()
			return StoreUsage{
				Reads:      s1.Reads + s2.Reads,
				Writes:     s1.Writes + s2.Writes,
				Errors:     s1.Errors + s2.Errors + s1.Malformed + s2.Malformed,
				ReadUnits:  float64(readHalves.Load()) / 2,
				WriteUnits: float64(writes.Load()),
				HasUnits:   true,
			}
		},
	}, nil
}

// Close deletes the table if the backend created it.
func (b *DynamoBackend) Close(ctx context.Context) error {
	if h, ok := b.client.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok {
		defer h.CloseIdleConnections() // the client's own pool (dynamo.NewClient)
	}
	if !b.created {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := dynamo.DeleteTable(dctx, b.client, b.table); err != nil {
		return fmt.Errorf("dynamodb: delete table %s: %w", b.table, err)
	}
	return nil
}
