// Command probe is the only program of the shell-less image the image
// tests build: it prints who and where it runs, and the files it is named.
package main

import (
	"fmt"
	"os"
)

func main() {
	wd, _ := os.Getwd()
	fmt.Printf("uid=%d gid=%d cwd=%s home=%s foo=%s\n", os.Getuid(), os.Getgid(), wd, os.Getenv("HOME"), os.Getenv("FOO"))
	for _, name := range os.Args[1:] {
		b, err := os.ReadFile(name)
		if err != nil {
			fmt.Printf("%s: %v\n", name, err)
			continue
		}
		fmt.Printf("%s: %s\n", name, b)
	}
}
