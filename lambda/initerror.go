package herdlambda

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"
)

// reportInitError tells the Lambda Runtime API at api that initialisation
// failed (POST /2018-06-01/runtime/init/error), so that the failure shows
// up as an init error with its message instead of a bare "Runtime exited".
// It is best effort: the process exits anyway.
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
		fmt.Fprintf(os.Stderr, "herdlambda: reporting the init error: %v\n", err)
		return
	}
	_ = resp.Body.Close()
}
