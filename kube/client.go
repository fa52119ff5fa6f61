package kube

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// TuneClient sets cfg up as hearth's daemons talk to the API server: the
// built-in types in protobuf, which the API server and client-go encode
// and decode in a fraction of JSON's time (the kubelet and the
// controllers do the same), JSON still accepted in answers; and a rate
// limit of 100 requests a second (bursts of 200) that a fleet's creates
// do not queue behind (client-go's default is 5). Patches keep their own
// content types.
func TuneClient(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = 100, 200
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}
