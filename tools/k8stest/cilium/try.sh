#!/bin/bash
# One try: cluster up (bridge), swap to the real Cilium, two pods, a deny policy, down, cleanup.
# Runs under flock /tmp/cnlab-kernel.lock. TRY names the log dir. AGENT_EXTRA adds agent flags.
N=t-cil
S=/var/lib/cnlab/clusters/$N
NS=/run/netns/cnlabk8s.$N.node1
D=$S/cilium
L=/tmp/cil-logs/$TRY; mkdir -p $L
T=/var/cache/cnlab/k8s-tools/current
K="$T/kubectl --kubeconfig=$S/kubeconfig --cache-dir=/tmp/cil/kcache"
C=/root/go/pkg/mod/github.com/cilium/cilium@v1.20.2
ts() { echo "[$(date -u +%T.%N | cut -c1-12)] $*"; }
exec > >(tee -a $L/try.log) 2>&1
ts start
/tmp/cil/snap.sh > $L/before.txt 2>&1
ts "cluster up"
/tmp/cil/cnlab cluster up --name $N > $L/up.log 2>&1; echo "up rc=$?"; tail -3 $L/up.log
ts "crds + podCIDR"
$K create -f $C/pkg/k8s/apis/cilium.io/client/crds/v2/ -f $C/pkg/k8s/apis/cilium.io/client/crds/v2alpha1/ > $L/crds.log 2>&1; echo "crds rc=$?"
$K wait --for=condition=Established crd --all --timeout=30s >> $L/crds.log 2>&1
$K patch node $N-node1 --type merge -p '{"spec":{"podCIDR":"10.244.0.0/24","podCIDRs":["10.244.0.0/24"]}}'
mkdir -p $D/bpffs $D/cgroup2 $D/run $D/cni-bin $D/sys
mount -t bpf bpffs $D/bpffs && echo "bpffs mounted"
mount --bind /sys/fs/cgroup/unified/cnlabk8s.$N.node1 $D/cgroup2 && echo "cgroup2 bound"
cat /proc/sys/kernel/unprivileged_bpf_disabled > $D/sys/unprivileged_bpf_disabled
cat /proc/sys/kernel/timer_migration > $D/sys/timer_migration
cat /proc/sys/net/core/bpf_jit_enable > $D/sys/bpf_jit_enable
ts "agent start"
AGENT_FLAGS="--k8s-kubeconfig-path=$S/pki/admin.kubeconfig --enable-ipv4=true --enable-ipv6=false
 --routing-mode=native --ipv4-native-routing-cidr=10.244.0.0/16 --kube-proxy-replacement=false
 --enable-l7-proxy=false --devices=eth0 --ipam=kubernetes
 --state-dir=$D/run --lib-dir=/tmp/cil/lib --bpf-root=$D/bpffs --cgroup-root=$D/cgroup2
 --socket-path=$D/run/cilium.sock --enable-hubble=false --enable-health-checking=false
 --enable-endpoint-health-checking=false --enable-ipv4-masquerade=false --cni-log-file=$D/cilium-cni.log
 $AGENT_EXTRA"
echo "agent flags: $AGENT_FLAGS" | tr '\n' ' '; echo
WRAP='set -e; mount --make-rprivate /proc; for f in kernel/unprivileged_bpf_disabled kernel/timer_migration net/core/bpf_jit_enable; do [ -e /proc/sys/$f ] && mount --bind '$D'/sys/$(basename $f) /proc/sys/$f; done; exec "$@"'
t0=$(date +%s.%N)
K8S_NODE_NAME=$N-node1 PATH=/tmp/cil/path:$PATH nsenter --net=$NS -- setsid unshare --mount --propagation unchanged -- /bin/sh -c "$WRAP" agent /tmp/cil/bin/cilium-agent $AGENT_FLAGS > $L/agent.log 2>&1 &
APID=$!
ready=0
for i in $(seq ${WAIT:-150}); do
  if curl -sf --unix-socket $D/run/cilium.sock http://localhost/v1/healthz > $L/healthz.json 2>/dev/null; then
    st=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cilium"]["state"])' $L/healthz.json 2>/dev/null)
    [ "$st" = Ok ] && { ready=1; break; }
  fi
  kill -0 $APID 2>/dev/null || { echo "agent died"; break; }
  sleep 1
done
t1=$(date +%s.%N)
ts "agent ready=$ready after $(echo "$t1 - $t0" | bc) s"
AP=$(pgrep -f "^/tmp/cil/bin/cilium-agent" | head -1); echo "agent pid $AP"
[ $ready = 0 ] && [ -n "$AP" ] && { kill -QUIT $AP; sleep 2; echo "SIGQUIT sent (goroutine dump in agent.log)"; }
[ -n "$AP" ] && ps -o pid,rss,vsz,etime,time,cmd -p $AP | cut -c1-120
tail -5 $L/agent.log
if [ $ready = 1 ]; then
  ts "containerd restart with a private CNI bin dir"
  ln -sf /usr/lib/cni/* $D/cni-bin/
  printf '#!/bin/sh\nCILIUM_SOCK=%s exec /tmp/cil/bin/cilium-cni "$@"\n' $D/run/cilium.sock > $D/cni-bin/cilium-cni; chmod +x $D/cni-bin/cilium-cni
  sed "s#bin_dir = \"/usr/lib/cni\"#bin_dir = \"$D/cni-bin\"#" $S/node1/containerd.toml > $D/containerd.toml
  grep bin_dir $D/containerd.toml
  CP=$(pgrep -f "^containerd --config $S/node1/containerd.toml"); echo "old containerd $CP"
  kill $CP; for i in $(seq 50); do kill -0 $CP 2>/dev/null || break; sleep 0.1; done
  rm -f $S/node1/net.d/10-cnlab.conflist
  printf '{"cniVersion":"0.3.1","name":"cnlab-%s","plugins":[{"type":"cilium-cni","enable-debug":true,"log-file":"%s/cilium-cni.log"}]}\n' $N $D > $S/node1/net.d/05-cilium.conflist
  nsenter --net=$NS -- setsid containerd --config $D/containerd.toml > $L/containerd2.log 2>&1 &
  sleep 2
  ts "pods"
  IMG=$($K -n kube-system get cm cnlab-cluster -o jsonpath='{.data.agentImage}')
  for p in a b; do cat <<P
apiVersion: v1
kind: Pod
metadata: {name: $p, labels: {app: $p}}
spec:
  nodeName: $N-node1
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: $IMG
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "mkdir -p /www && echo hello-$p > /www/index.html && httpd -p 8080 -h /www && exec sleep infinity"]
---
P
  done | $K apply -f -
  $K wait --for=condition=Ready pod/a pod/b --timeout=60s
  ts "pods ready?"
  $K get pods -o wide
  BIP=$($K get pod b -o jsonpath='{.status.podIP}'); AIP=$($K get pod a -o jsonpath='{.status.podIP}')
  get() { $K exec $1 -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 $2 8080 | tail -n 1"; echo "rc=$?"; }
  ts "a -> b ($BIP) no policy"; get a $BIP
  ts "b -> a ($AIP) no policy"; get b $AIP
  if [ -n "$SVC" ]; then
    printf 'apiVersion: v1\nkind: Service\nmetadata: {name: svc-b}\nspec:\n  selector: {app: b}\n  ports: [{port: 8080, targetPort: 8080}]\n' | $K apply -f -
    SIP=$($K get svc svc-b -o jsonpath='{.spec.clusterIP}'); sleep 2
    ts "a -> svc-b ($SIP:8080)"; get a $SIP
    curl -s --unix-socket $D/run/cilium.sock http://localhost/v1/service > $L/services.json
    python3 -c 'import json,sys; [print("cilium service", s["spec"]["frontend-address"], [b["ip"] for b in s["spec"].get("backend-addresses") or []]) for s in json.load(open(sys.argv[1]))]' $L/services.json
  fi
  printf 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-b}\nspec:\n  podSelector: {matchLabels: {app: b}}\n  policyTypes: [Ingress]\n' | $K apply -f -
  tp=$(date +%s.%N)
  for i in $(seq 20); do out=$(get a $BIP); echo "$out" | grep -q hello || break; sleep 0.5; done
  ts "a -> b with deny-b (after $(echo "$(date +%s.%N) - $tp" | bc) s): $out"
  ts "b -> a with deny-b"; get b $AIP
  $K delete networkpolicy deny-b
  sleep 2; ts "a -> b after delete"; get a $BIP
  curl -s --unix-socket $D/run/cilium.sock http://localhost/v1/endpoint > $L/endpoints.json
  python3 -c 'import json,sys
for e in json.load(open(sys.argv[1])):
  s=e["status"]; print(e["id"], s["state"], s.get("identity",{}).get("id"), s.get("networking",{}).get("addressing"), [l for l in s.get("identity",{}).get("labels",[]) if "app" in l])' $L/endpoints.json
  curl -s --unix-socket $D/run/cilium.sock http://localhost/v1/policy > $L/policy.json
  ip -n cnlabk8s.$N.node1 -o link > $L/links.txt; ip -n cnlabk8s.$N.node1 route > $L/routes.txt; cat $L/links.txt | awk '{print $2}'
  nsenter --net=$NS bpftool net > $L/bpftool-net.txt 2>&1; head -20 $L/bpftool-net.txt
  ps -o pid,rss,vsz,etime,time -p $AP
  ts "delete pods (CNI DEL)"
  $K delete pod a b --wait=true --timeout=30s
fi
$K get pods -A -o wide > $L/pods.txt 2>&1
cp $D/cilium-cni.log $L/ 2>/dev/null; cp $S/logs/*.log $L/ 2>/dev/null
ls -la /run/cilium > $L/run-cilium.txt 2>&1
find $D/bpffs | head -100 > $L/bpffs-pins.txt
ts "agent SIGTERM"; kill $AP 2>/dev/null; for i in $(seq 50); do kill -0 $AP 2>/dev/null || break; sleep 0.2; done
kill -0 $AP 2>/dev/null && echo "agent still alive"
ts "cluster down"
/tmp/cil/cnlab cluster down $N > $L/down.log 2>&1; echo "down rc=$?"; tail -3 $L/down.log
ts "cleanup of cilium leftovers"
ls -laR /run/cilium 2>/dev/null | head -30
rm -rf /run/cilium
for f in /var/lib/cni/results/cnlab-$N-*; do [ -e "$f" ] && echo "left: $f"; done
/tmp/cil/snap.sh > $L/after.txt 2>&1
diff $L/before.txt $L/after.txt && echo "MACHINE AS BEFORE" || echo "MACHINE DIFFERS"
ts end
