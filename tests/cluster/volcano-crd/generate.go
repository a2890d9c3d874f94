// Package generate names the Volcano API package whose PodGroup CRD the
// tests need as Volcano v1.10 to v1.13 release it (no subGroupPolicy). The Go
// module proxy serves no volcano.sh/volcano zip of those releases, so
// tests/harness/src/upstream.rs runs Volcano's own generator, controller-gen
// v0.18.0 (the version its v1.13.3 CRD names), over volcano.sh/apis v1.13.0,
// and holds the result to the sha256 of v1.13.3's released file.
package generate

import _ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
