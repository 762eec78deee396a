# Builds the example function for AWS Lambda (provided.al2023, arm64).
#
# sam build runs `make build-BikesFunction` here (template.yaml: BuildMethod
# makefile, CodeUri ./) with ARTIFACTS_DIR set to the function's build
# directory. CodeUri is the repository root, not examples/bikes: the example
# is a module of its own whose go.mod replaces herdguard with ../.., and
# sam build copies CodeUri elsewhere before running make. Without SAM:
#
#     make build-BikesFunction ARTIFACTS_DIR=build
#
# leaves build/bootstrap; README.md ("Deploy") zips and uploads
# it. The binary is static (CGO_ENABLED=0: it links no C library, so it runs
# whatever glibc the builder has) and reproducible (-trimpath, -buildvcs=false:
# no path or VCS state of the build machine in it), and uses the
# provided.al2023 runtime API directly (-tags lambda.norpc drops the RPC mode
# of the retired go1.x runtime).

GO ?= go
ARTIFACTS_DIR ?= build

.PHONY: build-BikesFunction
build-BikesFunction:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -C examples/bikes -trimpath -buildvcs=false -tags lambda.norpc \
		-ldflags='-s -w' -o $(abspath $(ARTIFACTS_DIR))/bootstrap .
