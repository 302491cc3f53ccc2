// Command genopenapi writes the OpenAPI document of moat's HTTP API
// (openapi.Document, built from package api) to standard output:
//
//	go run ./api/internal/genopenapi > docs/openapi.json
package main

import (
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/api/internal/openapi"
)

func main() {
	doc, err := openapi.Document()
	if err != nil {
		fmt.Fprintln(os.Stderr, "genopenapi:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(doc); err != nil {
		fmt.Fprintln(os.Stderr, "genopenapi:", err)
		os.Exit(1)
	}
}
