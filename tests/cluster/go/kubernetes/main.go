// Command tessera-k8s is one multi-call binary holding kube-apiserver,
// kube-controller-manager, kube-scheduler and kubectl. One binary links once
// instead of four times, which keeps the cold build short. The component runs
// by the name it is called as (argv[0] symlink) or by its first argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as the upstream mains do

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": func() *cobra.Command { return controllermanager.NewControllerManagerCommand() },
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := servers[name]; !ok && name != "kubectl" && len(os.Args) > 1 {
		// Called as tessera-k8s <component> ...: shift the component name.
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	if name == "kubectl" {
		runKubectl()
		return
	}
	newCommand, ok := servers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: tessera-k8s {kube-apiserver|kube-controller-manager|kube-scheduler|kubectl} [flags]\n")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}

// runKubectl mirrors k8s.io/kubernetes/cmd/kubectl/kubectl.go.
func runKubectl() {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
}
