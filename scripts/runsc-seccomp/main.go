// Command runsc-seccomp builds gVisor's runsc with its seccomp filters
// precompiled, as gVisor's own (Bazel) releases are. The runsc that
// `go install` builds from the Go module proxy has none: every sandbox
// start then compiles the sentry's and the gofer's filters from their
// rules, about a tenth of the CPU a start costs. This program asks gVisor
// (runsc/boot/filter/config and runsc/fsgofer/filter/config) for the
// programs its releases precompile, keeps those of configurations hearth
// can run (see needed), writes each filter package's filter_precompiled.go
// with them registered in a copy of the module (their bytecode in arrays
// of the binary's data: registerStatic), and builds runsc from that copy,
// static.
//
// Usage (from this directory, as scripts/install.sh runs it):
//
//	go run . -o /var/cache/hearth/bin/runsc
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

func main() {
	out := flag.String("o", "runsc", "where to write the runsc binary")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "runsc-seccomp:", err)
		os.Exit(1)
	}
}

// run builds runsc to out from a copy of the gvisor.dev/gvisor module with
// its filter files filled (prepare).
func run(out string) error {
	dir, err := os.MkdirTemp("", "runsc-seccomp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	build, err := prepare(dir)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := goIn(build, "build", "-trimpath", "-o", abs, "gvisor.dev/gvisor/runsc")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// goIn is the go command with args in the build module dir that prepare
// wrote, static (no cgo), and free to add what the module's go.mod lacks
// (it has no go.sum).
func goIn(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	return cmd
}

// prepare copies the gvisor.dev/gvisor module into dir (the module cache
// is read-only, and go build -overlay may not replace files in it), fills
// the two filter files of the copy (generate), and writes a build module
// in dir that replaces gvisor.dev/gvisor with the copy. It returns the
// build module's directory.
func prepare(dir string) (string, error) {
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "gvisor.dev/gvisor").Output()
	if err != nil {
		return "", fmt.Errorf("locate gvisor.dev/gvisor: %w", err)
	}
	root, version, _ := strings.Cut(strings.TrimSpace(string(mod)), " ")
	src := filepath.Join(dir, "gvisor")
	if err := exec.Command("cp", "-r", root, src).Run(); err != nil {
		return "", fmt.Errorf("copy %s: %w", root, err)
	}
	if err := exec.Command("chmod", "-R", "u+w", src).Run(); err != nil {
		return "", err
	}
	for _, f := range []struct {
		pkg      string
		programs func() ([]precompiledseccomp.Program, error)
	}{
		{"runsc/boot/filter", bootconfig.PrecompiledPrograms},
		{"runsc/fsgofer/filter", goferconfig.PrecompiledPrograms},
	} {
		if err := generate(filepath.Join(src, f.pkg, "filter_precompiled.go"), f.programs); err != nil {
			return "", fmt.Errorf("%s: %w", f.pkg, err)
		}
	}
	build := filepath.Join(dir, "build")
	if err := os.Mkdir(build, 0o755); err != nil {
		return "", err
	}
	gomod := fmt.Sprintf("module runscbuild\n\ngo 1.26\n\nrequire gvisor.dev/gvisor %s\n\nreplace gvisor.dev/gvisor => %s\n", version, src)
	return build, os.WriteFile(filepath.Join(build, "go.mod"), []byte(gomod), 0o644)
}

// generate rewrites the filter package's file path with the programs
// registered and precompilation marked as done at build time.
func generate(path string, programs func() ([]precompiledseccomp.Program, error)) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	all, err := programs()
	if err != nil {
		return fmt.Errorf("precompile: %w", err)
	}
	var progs []precompiledseccomp.Program
	for _, p := range all {
		if needed(p.Name) {
			progs = append(progs, p)
		}
	}
	const (
		disabled = "const PrecompilationDisabledAtBuildTime = true"
		register = "\tprograms := make(map[string]precompiledseccomp.Program)\n"
	)
	text := string(src)
	if !strings.Contains(text, disabled) || !strings.Contains(text, register) {
		return fmt.Errorf("%s is not the file this program knows how to fill", path)
	}
	var reg, arrays strings.Builder
	reg.WriteString(register)
	for i, p := range progs {
		registerStatic(&reg, &arrays, fmt.Sprintf("precompiledBytecode%d", i), p)
	}
	text = strings.Replace(text, disabled, "const PrecompilationDisabledAtBuildTime = false", 1)
	text = strings.Replace(text, register, reg.String(), 1) + arrays.String()
	fmt.Fprintf(os.Stderr, "runsc-seccomp: %d of %d programs for %s\n", len(progs), len(all), filepath.Dir(path))
	return os.WriteFile(path, []byte(text), 0o644)
}

// registerStatic writes to reg the statement that registers p in the
// programs map, and to arrays the package-level array that holds its
// bytecode. gVisor's own rendering (Program.Registration) writes the
// bytecode as a slice literal, which registration copies to the heap:
// about 190 KB for the sentry's 24 programs and 70 KB for the gofer's 32,
// kept for the life of every sandbox though each process installs one.
// An array the compiler lays out in the binary's data costs nothing until
// read, and then only the pages read, which are the binary's file pages,
// shared by every sandbox. RenderInstructions writes the program's
// variables into its Bytecode32 in place; that copies on write only the
// pages it touches, of the one program a process renders, once.
func registerStatic(reg, arrays *strings.Builder, name string, p precompiledseccomp.Program) {
	fmt.Fprintf(arrays, "\nvar %s = [...]uint32{", name)
	for i, v := range p.Bytecode32 {
		if i%8 == 0 {
			arrays.WriteString("\n\t")
		} else {
			arrays.WriteString(" ")
		}
		fmt.Fprintf(arrays, "0x%08x,", v)
	}
	arrays.WriteString("\n}\n")
	fmt.Fprintf(reg, "\tprograms[%q] = precompiledseccomp.Program{\n\t\tName: %q,\n\t\tBytecode32: %s[:],\n\t\tVarOffsets: map[string][]int{\n", p.Name, p.Name, name)
	for _, v := range slices.Sorted(maps.Keys(p.VarOffsets)) {
		fmt.Fprintf(reg, "\t\t\t%q: %#v,\n", v, p.VarOffsets[v])
	}
	reg.WriteString("\t\t},\n\t}\n")
}

// needed reports whether the program named key (its filter configuration,
// as in `NVProxy=false TPUProxy=false`) is one a hearth sandbox can use:
// none that proxies GPUs, TPUs or RDMA devices, which hearth never gives a
// sandbox. A runsc process registers every program of its filter package
// when it installs its filter: all 576 of gVisor's releases took 2.5 MB of
// each sentry's heap, about a sixth of an idle sandbox's memory. A
// configuration left out still runs, with its filter compiled at start.
func needed(key string) bool {
	for _, device := range []string{"NVProxy=true", "TPUProxy=true", "RDMAProxy=true"} {
		if strings.Contains(key, device) {
			return false
		}
	}
	return true
}
