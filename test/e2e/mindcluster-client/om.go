// The Recover service's NIC switch and stress test (recover.proto;
// docs/mindcluster.md, "NIC switch and stress test"): an operator and the
// job's TaskD played in one process, end to end through a real ClusterD.
// Kept apart from main.go (its own flags and subcommands) so that the other
// flows' changes there merge without touching this.
//
// Printed on stdout, one JSON line each:
//
//	{"om_reply": Status}                    SwitchNicTrack / StressTest, and TaskD's calls
//	{"om_signal": ProcessManageSignal}      each signal TaskD gets (keep-alives left out)
//	{"om_switch": SwitchRankList}           TaskD's NIC-switch notice
//	{"om_stress": StressTestRankParams}     TaskD's stress-test notice
//	{"om_result": SwitchNicResponse|StressTestResponse}  the operator's stream
//
// Usage:
//
//	mcclient nicswitch  -server ADDR -job UID -switch-node N -switch-devs 1[,0] [-deadline 60s]
//	mcclient stresstest -server ADDR -job UID -ops 0[,1] [-fault-rank R] [-deadline 60s]
//
// TaskD answers every step with success; with -fault-rank, the stress test
// of that rank reports code "2" (a fault found) for each of its ops. Exit 0
// once the operator's stream ended OK (its last message is the outcome), 1
// an RPC failed, 2 the deadline passed first.
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"google.golang.org/grpc"

	recoverpb "clusterd.test/mcclient/gen/recover"
)

type omOptions struct {
	node, devs, ops, faultRank *string
}

// omFlags adds the subcommands' own flags to main's flag set.
func omFlags(fs *flag.FlagSet) omOptions {
	return omOptions{
		node:      fs.String("switch-node", "", "nicswitch: the node whose chips' NICs switch"),
		devs:      fs.String("switch-devs", "", "nicswitch: the chips (device ids), comma-separated"),
		ops:       fs.String("ops", "0", "stresstest: the operations for every rank (0 AIC, 1 P2P), comma-separated"),
		faultRank: fs.String("fault-rank", "", "stresstest: the rank whose test finds a fault (code \"2\")"),
	}
}

// runOm runs `cmd` if it is one of this file's; false otherwise.
func runOm(cmd string, conn *grpc.ClientConn, job string, deadline time.Duration, o omOptions) bool {
	if cmd != "nicswitch" && cmd != "stresstest" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	rc := recoverpb.NewRecoverClient(conn)
	taskd := &recoverpb.ClientInfo{JobId: job, Role: "taskd"}
	reply := func(what string, st *recoverpb.Status, err error) {
		if err != nil {
			if ctx.Err() != nil {
				fatalf(2, "%s: the deadline passed", what)
			}
			fatalf(1, "%s: %v", what, err)
		}
		emit("om_reply", st)
		if st.GetCode() != 0 {
			fatalf(1, "%s: code %d (%s)", what, st.GetCode(), st.GetInfo())
		}
	}
	st, err := rc.Init(ctx, taskd)
	reply("Init", st, err)
	st, err = rc.Register(ctx, taskd)
	reply("Register", st, err)
	signals, err := rc.SubscribeProcessManageSignal(ctx, taskd)
	if err != nil {
		fatalf(1, "SubscribeProcessManageSignal: %v", err)
	}
	// The server's headers come with its first message (a keep-alive within
	// 5 s): the subscription is in place before the operator asks.
	if _, err := signals.Header(); err != nil {
		fatalf(1, "SubscribeProcessManageSignal: %v", err)
	}

	if cmd == "nicswitch" {
		notify, err := rc.SubscribeNotifySwitch(ctx, taskd)
		if err != nil {
			fatalf(1, "SubscribeNotifySwitch: %v", err)
		}
		go func() {
			for {
				msg, err := notify.Recv()
				if err != nil {
					return
				}
				emit("om_switch", msg)
				st, err := rc.ReplySwitchNicResult(ctx, &recoverpb.SwitchResult{JobId: job, Result: true})
				reply("ReplySwitchNicResult", st, err)
			}
		}()
		req := &recoverpb.SwitchNics{JobID: job, NicOps: map[string]*recoverpb.DeviceList{*o.node: {}}}
		for _, d := range strings.Split(*o.devs, ",") {
			req.NicOps[*o.node].Dev = append(req.NicOps[*o.node].Dev, d)
			req.NicOps[*o.node].Op = append(req.NicOps[*o.node].Op, true)
		}
		st, err := rc.SwitchNicTrack(ctx, req)
		reply("SwitchNicTrack", st, err)
	} else {
		notify, err := rc.SubscribeNotifyExecStressTest(ctx, taskd)
		if err != nil {
			fatalf(1, "SubscribeNotifyExecStressTest: %v", err)
		}
		go func() {
			for {
				msg, err := notify.Recv()
				if err != nil {
					return
				}
				emit("om_stress", msg)
				res := &recoverpb.StressTestResult{JobId: job, StressResult: map[string]*recoverpb.StressTestRankResult{}}
				for rank, ops := range msg.GetStressParam() {
					r := &recoverpb.StressTestRankResult{RankResult: map[string]*recoverpb.StressTestOpResult{}}
					for _, op := range ops.GetOps() {
						code, text := "0", "pass"
						if rank == *o.faultRank {
							code, text = "2", "a fault found"
						}
						r.RankResult[strconv.FormatInt(op, 10)] = &recoverpb.StressTestOpResult{Code: code, Result: text}
					}
					res.StressResult[rank] = r
				}
				st, err := rc.ReplyStressTestResult(ctx, res)
				reply("ReplyStressTestResult", st, err)
			}
		}()
		req := &recoverpb.StressTestParam{JobID: job}
		for _, s := range strings.Split(*o.ops, ",") {
			op, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				fatalf(64, "-ops: %q is not a number", s)
			}
			req.AllNodesOps = append(req.AllNodesOps, op)
		}
		st, err := rc.StressTest(ctx, req)
		reply("StressTest", st, err)
	}

	// TaskD: pause, then continue, each answered with success.
	go func() {
		for {
			sig, err := signals.Recv()
			if err != nil {
				return
			}
			if sig.GetSignalType() == "keep-alive" {
				continue
			}
			emit("om_signal", sig)
			switch {
			case sig.GetSignalType() == "stopTrain":
				st, err := rc.ReportStopComplete(ctx, &recoverpb.StopCompleteRequest{JobId: job, Status: &recoverpb.Status{}})
				reply("ReportStopComplete", st, err)
			case sig.GetSignalType() == "changeStrategy" && sig.GetChangeStrategy() == "continue":
				st, err := rc.ReportRecoverStatus(ctx, &recoverpb.RecoverStatusRequest{
					JobId: job, Status: &recoverpb.Status{}, Strategy: "continue"})
				reply("ReportRecoverStatus", st, err)
			}
		}
	}()

	// The operator follows it to the end.
	type recver interface{ RecvMsg(any) error }
	var results recver
	var next func() proto.Message
	if cmd == "nicswitch" {
		s, err := rc.SubscribeSwitchNicSignal(ctx, &recoverpb.SwitchNicRequest{JobID: job})
		if err != nil {
			fatalf(1, "SubscribeSwitchNicSignal: %v", err)
		}
		results, next = s, func() proto.Message { return &recoverpb.SwitchNicResponse{} }
	} else {
		s, err := rc.SubscribeStressTestResponse(ctx, &recoverpb.StressTestRequest{JobID: job})
		if err != nil {
			fatalf(1, "SubscribeStressTestResponse: %v", err)
		}
		results, next = s, func() proto.Message { return &recoverpb.StressTestResponse{} }
	}
	for {
		msg := next()
		err := results.RecvMsg(msg)
		if err == io.EOF {
			os.Exit(0)
		}
		if err != nil {
			if ctx.Err() != nil {
				fatalf(2, "the operation did not end within %v", deadline)
			}
			fatalf(1, "the operator's stream: %v", err)
		}
		emit("om_result", msg)
	}
}
