package service

import (
	"github.com/cnlab/cnlab/internal/k8sdoc"
	"gopkg.in/yaml.v3"
)

// Raw types mirror the Kubernetes objects field by field, decoded
// strictly. Fields of the real API that cnlab does not implement are
// declared as yaml.Node, so that their presence is refused with the reason
// rather than reported as unknown.

type rawObject struct {
	k8sdoc.Head `yaml:",inline"`
	Spec        yaml.Node `yaml:"spec"` // Service
	// EndpointSlice (its fields are at the top level).
	AddressType string    `yaml:"addressType"`
	Endpoints   yaml.Node `yaml:"endpoints"`
	Ports       yaml.Node `yaml:"ports"`
}

type rawServiceSpec struct {
	Type                          string            `yaml:"type"`
	Selector                      map[string]string `yaml:"selector"`
	ClusterIP                     string            `yaml:"clusterIP"`
	ClusterIPs                    []string          `yaml:"clusterIPs"`
	Ports                         []rawServicePort  `yaml:"ports"`
	SessionAffinity               string            `yaml:"sessionAffinity"`
	SessionAffinityConfig         *rawAffinityCfg   `yaml:"sessionAffinityConfig"`
	InternalTrafficPolicy         string            `yaml:"internalTrafficPolicy"`
	ExternalTrafficPolicy         string            `yaml:"externalTrafficPolicy"`
	PublishNotReadyAddresses      bool              `yaml:"publishNotReadyAddresses"`
	IPFamilies                    []string          `yaml:"ipFamilies"`
	IPFamilyPolicy                string            `yaml:"ipFamilyPolicy"`
	ExternalName                  yaml.Node         `yaml:"externalName"`
	ExternalIPs                   yaml.Node         `yaml:"externalIPs"`
	LoadBalancerIP                yaml.Node         `yaml:"loadBalancerIP"`
	LoadBalancerSourceRanges      yaml.Node         `yaml:"loadBalancerSourceRanges"`
	LoadBalancerClass             yaml.Node         `yaml:"loadBalancerClass"`
	AllocateLoadBalancerNodePorts yaml.Node         `yaml:"allocateLoadBalancerNodePorts"`
	HealthCheckNodePort           yaml.Node         `yaml:"healthCheckNodePort"`
	TrafficDistribution           yaml.Node         `yaml:"trafficDistribution"`
}

type rawServicePort struct {
	Name        string    `yaml:"name"`
	Protocol    string    `yaml:"protocol"`
	Port        int       `yaml:"port"`
	TargetPort  yaml.Node `yaml:"targetPort"` // a number or a port name
	NodePort    int       `yaml:"nodePort"`
	AppProtocol string    `yaml:"appProtocol"`
}

type rawAffinityCfg struct {
	ClientIP *struct {
		TimeoutSeconds *int `yaml:"timeoutSeconds"`
	} `yaml:"clientIP"`
}

type rawSliceEndpoint struct {
	Addresses          []string      `yaml:"addresses"`
	Conditions         rawConditions `yaml:"conditions"`
	NodeName           string        `yaml:"nodeName"`
	Hostname           yaml.Node     `yaml:"hostname"`
	TargetRef          yaml.Node     `yaml:"targetRef"`
	Zone               yaml.Node     `yaml:"zone"`
	Hints              yaml.Node     `yaml:"hints"`
	DeprecatedTopology yaml.Node     `yaml:"deprecatedTopology"`
}

type rawConditions struct {
	Ready       *bool `yaml:"ready"`
	Serving     *bool `yaml:"serving"`
	Terminating *bool `yaml:"terminating"`
}

type rawSlicePort struct {
	Name        *string `yaml:"name"`
	Protocol    string  `yaml:"protocol"`
	Port        *int    `yaml:"port"`
	AppProtocol string  `yaml:"appProtocol"`
}
