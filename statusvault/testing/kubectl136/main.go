// kubectl of Kubernetes 1.36, built as k8s.io/kubernetes/cmd/kubectl builds it (python -m statusvault.testing.kubectl
// build): the tutorial's test runs its commands with it (docs/tutorial.md). Test tooling, never shipped.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
