package oci

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
)

// MemInfo returns the host's available and total memory in bytes
// (MemAvailable and MemTotal of /proc/meminfo): what the sandboxes this
// driver starts share, for node.Options.MemInfo.
func MemInfo() (available, total int64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || key != "MemAvailable" && key != "MemTotal" {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if key == "MemTotal" {
			total = kb << 10
		} else {
			available = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if total == 0 {
		return 0, 0, errors.New("/proc/meminfo has no MemTotal")
	}
	return available, total, nil
}
