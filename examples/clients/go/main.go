// A Go client for mpsd over TLS with a bearer token: submits a small Fashion-MNIST TrainJob,
// follows its events (resuming after a dropped stream with after_seq) and prints the outcome.
//
// Settings come from the environment:
//   MPSD_ADDRESS     host:port of the daemon's TLS listener, e.g. gpu-box:7070
//   MPSD_CA          the CA certificate (PEM) that signed the daemon's certificate
//   MPSD_TOKEN_FILE  a file holding the token (`mpsd token add --name NAME --role submitter`)
//   MPSD_DATA_ROOT   the Fashion-MNIST folder on the daemon's machine (default
//                    /usr/share/datasets/fashion-mnist)
//
// Build (docs/clients.md): stubs from proto/mpsd/v1/mpsd.proto with protoc-gen-go and
// protoc-gen-go-grpc, import path "mpsd/v1" (the proto's go_package).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	mpsdv1 "mpsd/v1"
)

// bearer sends "authorization: Bearer <token>" with every call; TLS is required for it.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "mpsd-go-example: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	address, caFile, tokenFile := os.Getenv("MPSD_ADDRESS"), os.Getenv("MPSD_CA"), os.Getenv("MPSD_TOKEN_FILE")
	if address == "" || caFile == "" || tokenFile == "" {
		fail("set MPSD_ADDRESS, MPSD_CA and MPSD_TOKEN_FILE")
	}
	dataRoot := os.Getenv("MPSD_DATA_ROOT")
	if dataRoot == "" {
		dataRoot = "/usr/share/datasets/fashion-mnist"
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		fail("MPSD_CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		fail("MPSD_CA: %s holds no PEM certificate", caFile)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		fail("MPSD_TOKEN_FILE: %v", err)
	}
	conn, err := grpc.Dial(address,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})),
		grpc.WithPerRPCCredentials(bearer(strings.TrimSpace(string(token)))))
	if err != nil {
		fail("%s: %v", address, err)
	}
	defer conn.Close()
	client := mpsdv1.NewJobServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	job, err := client.SubmitJob(ctx, &mpsdv1.SubmitJobRequest{
		Name: "go-example",
		Spec: &mpsdv1.SubmitJobRequest_TrainJob{TrainJob: &mpsdv1.TrainJob{
			Model:     &mpsdv1.ModelSpec{Name: "convnet"},
			Dataset:   &mpsdv1.DatasetSpec{Name: "fashion-mnist", Root: dataRoot, LimitTrain: 512, LimitTest: 256},
			BatchSize: proto.Int32(64),
			Epochs:    proto.Int32(1),
			Device:    "cpu",
		}},
	})
	if err != nil {
		fail("SubmitJob: %v", err)
	}
	fmt.Printf("submitted job %s\n", job.Id)

	// Follow the job; after a broken stream, call again with the last seq received.
	var lastSeq int64
	for {
		stream, err := client.StreamEvents(ctx, &mpsdv1.StreamEventsRequest{JobId: job.Id, AfterSeq: lastSeq})
		if err != nil {
			fail("StreamEvents: %v", err)
		}
		for {
			event, err := stream.Recv()
			if err == io.EOF {
				final, err := client.GetJob(ctx, &mpsdv1.GetJobRequest{JobId: job.Id})
				if err != nil {
					fail("GetJob: %v", err)
				}
				fmt.Printf("job %s %s\n", final.Id, final.State)
				if final.State != mpsdv1.Job_SUCCEEDED {
					os.Exit(1)
				}
				return
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "stream broke (%v); resuming after seq %d\n", err, lastSeq)
				time.Sleep(time.Second)
				break
			}
			if event.Seq > 0 {
				lastSeq = event.Seq
			}
			if epoch := event.GetEpoch(); epoch != nil {
				fmt.Printf("epoch %d test_accuracy %.4f\n", epoch.Epoch, epoch.TestAccuracy)
			}
		}
	}
}
