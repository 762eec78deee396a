package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// The function of this execution environment, built on first use. Lambda
// runs main once per environment; the sync.Once also keeps tests that call
// current() from building it twice.
var (
	buildOnce sync.Once
	built     *function
	buildErr  error
)

// current returns this environment's function, building it from the
// environment variables on first use.
func current() (*function, error) {
	buildOnce.Do(func() {
		built, buildErr = setup(context.Background(), os.LookupEnv, os.Stdout, os.Stderr)
	})
	return built, buildErr
}

func main() {
	f, err := current()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bikes: initialisation failed: %v\n", err)
		reportInitError(os.Getenv("AWS_LAMBDA_RUNTIME_API"), err)
		os.Exit(1)
	}
	lambda.Start(f.Handle)
}

// reportInitError tells the Lambda Runtime API that initialisation failed
// (POST /2018-06-01/runtime/init/error), so that the failure shows up as an
// init error with its message instead of a bare "Runtime exited". It is best
// effort: the process exits anyway.
func reportInitError(api string, cause error) {
	if api == "" {
		return
	}
	body, err := json.Marshal(map[string]any{
		"errorMessage": cause.Error(),
		"errorType":    "Runtime.InvalidConfiguration",
		"stackTrace":   []string{},
	})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api+"/2018-06-01/runtime/init/error", bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lambda-Runtime-Function-Error-Type", "Runtime.InvalidConfiguration")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bikes: reporting the init error: %v\n", err)
		return
	}
	_ = resp.Body.Close()
}
