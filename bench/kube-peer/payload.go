package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MindCluster's device plugin keeps one ConfigMap per node, named
// mindx-dl-deviceinfo-<node>, whose DeviceInfoCfg key holds the node's device
// list and faults as JSON; its controller follows them with an informer.
const (
	cmPrefix    = "mindx-dl-deviceinfo-"
	cmDataKey   = "DeviceInfoCfg"
	npusPerNode = 8
	faultCode   = "80E01801"
	// The seq and send time also travel as annotations so that the fan-out
	// watchers can read them without decoding the JSON a second time; the
	// informer consumer decodes DeviceInfoCfg like a real controller.
	annSeq  = "kube-peer.clusterd.local/seq"
	annSent = "kube-peer.clusterd.local/sent-unix-nano"
)

// deviceInfo is one node's DeviceInfoCfg: its 8 NPUs and their faults, plus
// the send time (unix ns) and sequence number the receivers time it by.
type deviceInfo struct {
	NodeName   string `json:"NodeName"`
	UpdateTime int64  `json:"UpdateTime"`
	Seq        uint64 `json:"Seq"`
	DeviceList []npu  `json:"DeviceList"`
}

type npu struct {
	Name       string   `json:"npu_name"`
	Health     string   `json:"health"`
	FaultLevel string   `json:"fault_level,omitempty"`
	FaultCodes []string `json:"fault_code"`
}

// node is one simulated node: its ConfigMap as last returned by the API
// server (the next Update sends it back with its resourceVersion) and the
// fault state the writer toggles.
type node struct {
	idx    int
	name   string
	cm     *corev1.ConfigMap
	info   deviceInfo
	faulty int // index of the faulty NPU, -1 when healthy
	raises int
}

func newNode(idx int) *node {
	n := &node{idx: idx, name: fmt.Sprintf("node-%05d", idx), faulty: -1}
	n.info.NodeName = n.name
	for d := range npusPerNode {
		n.info.DeviceList = append(n.info.DeviceList,
			npu{Name: fmt.Sprintf("Ascend910-%d", d), Health: "Healthy", FaultCodes: []string{}})
	}
	return n
}

func cmName(nodeName string) string { return cmPrefix + nodeName }

// toggle raises a fault on the next NPU when the node is healthy and clears
// it otherwise, so that every update changes the fault list.
func (n *node) toggle() {
	if n.faulty >= 0 {
		d := &n.info.DeviceList[n.faulty]
		d.Health, d.FaultLevel, d.FaultCodes = "Healthy", "", []string{}
		n.faulty = -1
		return
	}
	n.faulty = n.raises % npusPerNode
	n.raises++
	d := &n.info.DeviceList[n.faulty]
	d.Health, d.FaultLevel, d.FaultCodes = "Unhealthy", "SeparateNPU", []string{faultCode}
}

// stamp writes seq and the send time into the node's ConfigMap.
func (n *node) stamp(seq uint64, sentNS int64) error {
	n.info.Seq, n.info.UpdateTime = seq, sentNS
	body, err := json.Marshal(&n.info)
	if err != nil {
		return err
	}
	if n.cm.Data == nil {
		n.cm.Data = map[string]string{}
	}
	if n.cm.Annotations == nil {
		n.cm.Annotations = map[string]string{}
	}
	n.cm.Data[cmDataKey] = string(body)
	n.cm.Annotations[annSeq] = strconv.FormatUint(seq, 10)
	n.cm.Annotations[annSent] = strconv.FormatInt(sentNS, 10)
	return nil
}

// initialConfigMap is the node's ConfigMap before any fault.
func (n *node) initialConfigMap(ns string, nowNS int64) (*corev1.ConfigMap, error) {
	n.cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName(n.name), Namespace: ns}}
	err := n.stamp(0, nowNS)
	return n.cm, err
}

// payloadSizes returns the size of DeviceInfoCfg with one fault raised and
// the size of the whole ConfigMap as JSON.
func payloadSizes(ns string) (payload, object int, err error) {
	n := newNode(0)
	if _, err = n.initialConfigMap(ns, 1_700_000_000_000_000_000); err != nil {
		return 0, 0, err
	}
	n.toggle()
	if err = n.stamp(123456, 1_700_000_000_000_000_000); err != nil {
		return 0, 0, err
	}
	n.cm.ResourceVersion = "1234567"
	obj, err := json.Marshal(n.cm)
	return len(n.cm.Data[cmDataKey]), len(obj), err
}

// stampOf reads seq and send time from a received ConfigMap's annotations.
func stampOf(cm *corev1.ConfigMap) (seq uint64, sentNS int64, ok bool) {
	s, err1 := strconv.ParseUint(cm.Annotations[annSeq], 10, 64)
	t, err2 := strconv.ParseInt(cm.Annotations[annSent], 10, 64)
	return s, t, err1 == nil && err2 == nil
}

// decodeInfo decodes DeviceInfoCfg the way a MindCluster controller does.
func decodeInfo(cm *corev1.ConfigMap) (deviceInfo, error) {
	var info deviceInfo
	err := json.Unmarshal([]byte(cm.Data[cmDataKey]), &info)
	return info, err
}
