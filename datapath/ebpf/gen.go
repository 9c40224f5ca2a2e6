package ebpf

// The programs are compiled ahead of time and the results committed, so
// building cnlab needs no clang; `go generate ./datapath/ebpf` rebuilds
// them (clang 14 and libbpf-dev, installed by scripts/install.sh) and CI
// checks that doing so changes nothing.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type endpoint -type event -type config -type monitor -type policy_key -type policy_val -type ct_key -type ct_val -type counter -type peer -type ipcache_key -type ipcache6_key -type ct6_key -type event6 -type dir -type reason -type config_flag -type isolation -type monitor_level -type event_at -type identity -type rule_ref -type svc_config -type svc_key -type svc_val -type backend_key -type backend -type affinity_key -type affinity_val -type nat_key -type nat_val -type svc_config_flag -type svc_flag -type nat_dir -type sock_key -type nodeport_range -type l7 -type policy_act -type policy_prec -type rule_key -type rule_verdict -type svc6_config -type svc6_key -type backend6 -type affinity6_key -type affinity6_val -type nat6_key -type nat6_val -type sock6_key cnlab bpf/cnlab.c
