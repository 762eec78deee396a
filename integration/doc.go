// Package integration holds herdguard's tests against real DynamoDB Local,
// started once per test binary by testcontainers-go (see main_test.go), and
// the tests that span packages: the store conformance suites on DynamoDB,
// the 20-environment fleet test, the multi-process Lambda fleet over a
// loopback Runtime API, the reliability tests (DynamoDB and partner faults,
// bad data, rapid properties), cmd/outagesim run against DynamoDB Local,
// the import-direction rules, and the soak (build tag soak).
//
// Run them with the README's test command, ./.ci/test, which sets up a
// container engine and the DynamoDB Local image where none is available.
// The image is HERDGUARD_DYNAMODB_IMAGE (default amazon/dynamodb-local);
// HERDGUARD_DYNAMODB_ENDPOINT points the tests at a DynamoDB Local that is
// already running instead. If DynamoDB Local cannot be started the tests
// fail; only -short skips them.
//
// The package has no non-test code besides this comment.
package integration
