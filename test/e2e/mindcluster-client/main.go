// mcclient: a MindCluster client of ClusterD written against the MindCluster
// protos alone (proto/mindcluster), with stubs that protoc-gen-go and
// protoc-gen-go-grpc generate at test time (generate.sh), so that
// test/e2e/mindcluster_test.sh checks ClusterD's wire compatibility with a
// client that is not ClusterD's own C++ code.
//
// Every reply or message received is printed on stdout as one JSON line:
//
//	{"register": Status}           fault.Fault/Register
//	{"signal": FaultMsgSignal}     each message of fault.Fault/SubscribeFaultMsgSignal
//	{"query": FaultQueryResult}    fault.Fault/GetFaultMsgSignal
//	{"pubfault": RespStatus}       /PubFault/SendPublicFault
//	{"jobregister": Status}        job.Job/Register
//	{"summaries": JobSummarySignalList}  each message of job.Job/SubscribeJobSummarySignalList
//	{"configregister": Status}     config.Config/Register
//	{"ranktable": RankTableStream} each message of config.Config/SubscribeRankTable
//
// Usage:
//
//	mcclient register  -server ADDR -job ID -role ROLE
//	mcclient subscribe -server ADDR -job ID -role ROLE [-deadline 60s]
//	mcclient query     -server ADDR -job ID -role ROLE
//	mcclient pubfault  -server ADDR -resource R -fault-id ID -code C -assertion occur|recover|once
//	                   -node NAME -devices 1,2 [-fault-type NPU] [-version 1.0]
//	mcclient jobs      -server ADDR -role FdAgent -job ID -operator add|delete [-deadline 60s]
//	mcclient ranktable -server ADDR -job ID -role ROLE -count N [-deadline 60s]
//	mcclient nicswitch|stresstest ...  (om.go: the Recover service's NIC switch and stress test)
//
// jobs registers as faultdiag-online does (a clientId of its own, replaced by
// the server's) and follows SubscribeJobSummarySignalList until a summary of
// job ID with that operator arrives; ranktable registers for job ID and
// follows SubscribeRankTable until N rank tables arrived.
//
// Exit status: 0 done (subscribe: after a "normal" signal); 1 an RPC failed
// (its gRPC status on stderr); 2 a stream's deadline passed first; 3 a
// Register was refused (its reply printed); 64 bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	configpb "clusterd.test/mcclient/gen/config"
	faultpb "clusterd.test/mcclient/gen/fault"
	jobpb "clusterd.test/mcclient/gen/job"
	pubfaultpb "clusterd.test/mcclient/gen/pubfault"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mcclient register|subscribe|query|pubfault|jobs|ranktable|nicswitch|stresstest -server ADDR [flags] (see main.go, om.go)")
	os.Exit(64)
}

func fatalf(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "mcclient: "+format+"\n", args...)
	os.Exit(code)
}

// emit prints {"<kind>": <msg as proto JSON>} on one line. The field names
// are the protos' own (jobId, signalType, ...), as MindCluster's clients use.
func emit(kind string, msg proto.Message) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(msg)
	if err != nil {
		fatalf(1, "encoding %s: %v", kind, err)
	}
	fmt.Printf("{%q: %s}\n", kind, b)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	server := fs.String("server", "127.0.0.1:50051", "ClusterD's gRPC address (plaintext)")
	job := fs.String("job", "", "jobId (\"\": the whole cluster)")
	role := fs.String("role", "mindie", "role")
	deadline := fs.Duration("deadline", time.Minute, "subscribe: give up after this long without a \"normal\" signal")
	resource := fs.String("resource", "pingmesh", "pubfault: the sending system")
	faultID := fs.String("fault-id", "", "pubfault: faultId")
	code := fs.String("code", "", "pubfault: faultCode")
	assertion := fs.String("assertion", "occur", "pubfault: occur, recover or once")
	faultType := fs.String("fault-type", "NPU", "pubfault: faultType")
	node := fs.String("node", "", "pubfault: the influenced node's name")
	devices := fs.String("devices", "", "pubfault: the influenced deviceIds, comma-separated")
	version := fs.String("version", "1.0", "pubfault: the request's version")
	operator := fs.String("operator", "add", "jobs: stop after a summary of -job with this operator")
	count := fs.Int("count", 1, "ranktable: stop after this many rank tables")
	om := omFlags(fs) // nicswitch, stresstest (om.go)
	if err := fs.Parse(os.Args[2:]); err != nil || fs.NArg() != 0 {
		usage()
	}

	conn, err := grpc.NewClient(*server, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fatalf(1, "connecting to %s: %v", *server, err)
	}
	defer conn.Close()
	faults := faultpb.NewFaultClient(conn)
	info := &faultpb.ClientInfo{JobId: *job, Role: *role}

	switch cmd {
	case "register":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := faults.Register(ctx, info)
		if err != nil {
			fatalf(1, "Register: %v", err)
		}
		emit("register", st)

	case "query":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := faults.GetFaultMsgSignal(ctx, info)
		if err != nil {
			fatalf(1, "GetFaultMsgSignal: %v", err)
		}
		emit("query", res)

	case "subscribe":
		ctx, cancel := context.WithTimeout(context.Background(), *deadline)
		defer cancel()
		st, err := faults.Register(ctx, info)
		if err != nil {
			fatalf(1, "Register: %v", err)
		}
		emit("register", st)
		if st.GetCode() != 0 {
			os.Exit(3)
		}
		stream, err := faults.SubscribeFaultMsgSignal(ctx, info)
		if err != nil {
			fatalf(1, "SubscribeFaultMsgSignal: %v", err)
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					fatalf(2, "no \"normal\" signal within %v", *deadline)
				}
				fatalf(1, "SubscribeFaultMsgSignal: %v", err)
			}
			emit("signal", msg)
			if msg.GetSignalType() == "normal" {
				return
			}
		}

	case "pubfault":
		var ids []int32
		for _, s := range strings.Split(*devices, ",") {
			if s == "" {
				continue
			}
			d, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				fatalf(64, "-devices: %q is not a number", s)
			}
			ids = append(ids, int32(d))
		}
		now := time.Now().UnixMilli()
		req := &pubfaultpb.PublicFaultRequest{
			Id:        fmt.Sprintf("mcclient-%d", time.Now().UnixNano()),
			Timestamp: now,
			Version:   *version,
			Resource:  *resource,
			Faults: []*pubfaultpb.Fault{{
				FaultId:     *faultID,
				FaultType:   *faultType,
				FaultCode:   *code,
				FaultTime:   now,
				Assertion:   *assertion,
				Influence:   []*pubfaultpb.PubFaultInfo{{NodeName: *node, DeviceIds: ids}},
				Description: "sent by mcclient",
			}},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := pubfaultpb.NewPubFaultClient(conn).SendPublicFault(ctx, req)
		if err != nil {
			fatalf(1, "SendPublicFault: %v", err)
		}
		emit("pubfault", st)

	case "jobs":
		ctx, cancel := context.WithTimeout(context.Background(), *deadline)
		defer cancel()
		jobs := jobpb.NewJobClient(conn)
		info := &jobpb.ClientInfo{Role: *role, ClientId: fmt.Sprintf("mcclient-%d", time.Now().UnixNano())}
		st, err := jobs.Register(ctx, info)
		if err != nil {
			fatalf(1, "job.Job/Register: %v", err)
		}
		emit("jobregister", st)
		if st.GetCode() != 0 {
			os.Exit(3)
		}
		info.ClientId = st.GetClientId()
		stream, err := jobs.SubscribeJobSummarySignalList(ctx, info)
		if err != nil {
			fatalf(1, "SubscribeJobSummarySignalList: %v", err)
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					fatalf(2, "no summary of job %s with operator %s within %v", *job, *operator, *deadline)
				}
				fatalf(1, "SubscribeJobSummarySignalList: %v", err)
			}
			emit("summaries", msg)
			for _, s := range msg.GetJobSummarySignals() {
				if s.GetJobId() == *job && s.GetOperator() == *operator {
					return
				}
			}
		}

	case "ranktable":
		ctx, cancel := context.WithTimeout(context.Background(), *deadline)
		defer cancel()
		cfg := configpb.NewConfigClient(conn)
		info := &configpb.ClientInfo{JobId: *job, Role: *role}
		st, err := cfg.Register(ctx, info)
		if err != nil {
			fatalf(1, "config.Config/Register: %v", err)
		}
		emit("configregister", st)
		if st.GetCode() != 0 {
			os.Exit(3)
		}
		stream, err := cfg.SubscribeRankTable(ctx, info)
		if err != nil {
			fatalf(1, "SubscribeRankTable: %v", err)
		}
		for n := 0; n < *count; n++ {
			msg, err := stream.Recv()
			if err != nil {
				if ctx.Err() != nil {
					fatalf(2, "%d of %d rank tables within %v", n, *count, *deadline)
				}
				fatalf(1, "SubscribeRankTable: %v", err)
			}
			emit("ranktable", msg)
		}

	default:
		if !runOm(cmd, conn, *job, *deadline, om) {
			usage()
		}
	}
}
