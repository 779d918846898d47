// Command runc-capdrop is a runc wrapper for hosts whose capability bounding
// set lacks capabilities that a privileged container asks for (on our CI
// machines CAP_SYS_RESOURCE is missing, and runc then fails every
// --privileged container with "unable to apply caps: operation not
// permitted"; kind runs its nodes privileged).
//
// It removes from the OCI spec every capability that is not in its own
// bounding set, then execs the real runc with the same arguments. Two files
// can carry capabilities: <bundle>/config.json (create/run, --bundle/-b,
// default the working directory) and the process file of `runc exec`
// (--process/-p), which `docker exec --privileged` uses.
//
// hack/docker.sh registers it as dockerd's default runtime only on hosts
// that need it; on a normal host nothing changes.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames maps the kernel's capability numbers (linux/capability.h) to
// the names OCI specs use.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD",
	"CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	real := realRunc()
	allowed, err := boundingSet()
	if err != nil {
		fatal(err)
	}
	for _, f := range specFiles(os.Args[1:]) {
		if err := filterFile(f, allowed); err != nil {
			fatal(err)
		}
	}
	argv := append([]string{real}, os.Args[1:]...)
	fatal(syscall.Exec(real, argv, os.Environ()))
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "runc-capdrop: %v\n", err)
	os.Exit(1)
}

func realRunc() string {
	if p := os.Getenv("RUNC_CAPDROP_RUNC"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "runc"
}

// boundingSet returns the names of the capabilities in this process's
// bounding set (CapBnd in /proc/self/status).
func boundingSet() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "CapBnd:") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "CapBnd:")), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		allowed := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<uint(i)) != 0 {
				allowed[name] = true
			}
		}
		return allowed, nil
	}
	return nil, fmt.Errorf("no CapBnd in /proc/self/status")
}

// specFiles finds the spec files named by runc's command line.
func specFiles(args []string) []string {
	var files []string
	bundle, sawBundle := "", false
	cmd := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() string {
			if j := strings.IndexByte(a, '='); j >= 0 {
				return a[j+1:]
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b" || strings.HasPrefix(a, "--bundle="):
			bundle, sawBundle = val(), true
		case a == "--process" || a == "-p" || strings.HasPrefix(a, "--process="):
			files = append(files, val())
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		case cmd == "" && (a == "--root" || a == "--log" || a == "--log-format" || a == "--criu"):
			i++ // global flag with a separate value
		}
	}
	if sawBundle || cmd == "create" || cmd == "run" {
		if bundle == "" {
			bundle = "."
		}
		files = append(files, filepath.Join(bundle, "config.json"))
	}
	return files
}

// filterFile drops the disallowed capabilities from a config.json (under
// "process") or a process file (at the top level). Numbers are kept exact.
func filterFile(path string, allowed map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	proc := doc
	if p, ok := doc["process"].(map[string]any); ok {
		proc = p
	}
	caps, ok := proc["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	changed := false
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if name, ok := c.(string); ok && !allowed[name] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, info.Mode().Perm())
}
