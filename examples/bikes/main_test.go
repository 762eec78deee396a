package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReportInitError(t *testing.T) {
	type got struct {
		path, errType, body string
	}
	ch := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{r.URL.Path, r.Header.Get("Lambda-Runtime-Function-Error-Type"), string(b)}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	reportInitError(strings.TrimPrefix(srv.URL, "http://"), errInit("TABLE_NAME is not set"))
	g := <-ch
	if g.path != "/2018-06-01/runtime/init/error" || g.errType != "Runtime.InvalidConfiguration" {
		t.Errorf("posted %+v", g)
	}
	var body struct {
		Message string `json:"errorMessage"`
		Type    string `json:"errorType"`
	}
	if err := json.Unmarshal([]byte(g.body), &body); err != nil || body.Message != "TABLE_NAME is not set" || body.Type != "Runtime.InvalidConfiguration" {
		t.Errorf("body %q: %+v %v", g.body, body, err)
	}
	// Outside Lambda there is nobody to tell; it must not block or panic.
	reportInitError("", errInit("x"))
}

type errInit string

func (e errInit) Error() string { return string(e) }
