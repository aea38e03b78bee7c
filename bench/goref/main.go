// goref: the compiled reference `make bench` measures statusvault against. It does what the bench's bare
// Python client does, with Go's standard library (net/http, encoding/json, compress/gzip), so that the ratios
// say how far statusvault is from a compiled client doing the same work:
//
//	goref write -server URL -token T -path /apis/G/V -plural P -parallel 16 -objects FILE.jsonl
//	    for each object (one JSON per line, metadata.namespace set): POST it, decode the answer, set its
//	    status to the saved one, PUT /status, decode the answer; `parallel` at once, HTTP/1.1 keep-alive.
//	goref list -server URL -token T -path /apis/G/V/P -out FILE.gz
//	    paginated LIST (limit 500), each page decoded, each object encoded again into a gzip stream (level 3).
//
// Both print {"objects": N} on stdout; the bench measures wall time and CPU (wait4) from outside.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
)

type client struct {
	server, token string
	http          *http.Client
}

func newClient(server, token string, conns int) *client {
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the test cluster's self-signed certificate
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
	}
	return &client{server: server, token: token, http: &http.Client{Transport: transport}}
}

// call sends one request and decodes the JSON answer into out.
func (c *client) call(method, path string, body []byte, out any) error {
	req, err := http.NewRequest(method, c.server+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %.200s", method, path, resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
}

type object = map[string]any

func (c *client) createWithStatus(base, plural string, line []byte) error {
	var obj object
	if err := json.Unmarshal(line, &obj); err != nil {
		return err
	}
	meta := obj["metadata"].(map[string]any)
	collection := fmt.Sprintf("%s/namespaces/%s/%s", base, meta["namespace"], plural)
	var created object
	if err := c.call("POST", collection, line, &created); err != nil {
		return err
	}
	created["status"] = obj["status"]
	body, err := json.Marshal(created)
	if err != nil {
		return err
	}
	var written object
	return c.call("PUT", fmt.Sprintf("%s/%s/status", collection, meta["name"]), body, &written)
}

func write(c *client, base, plural, objects string, parallel int) (int64, error) {
	f, err := os.Open(objects)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	lines := make(chan []byte, parallel*2)
	var done atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for line := range lines {
				if err := c.createWithStatus(base, plural, line); err != nil {
					failed.CompareAndSwap(nil, err)
					continue
				}
				done.Add(1)
			}
		}()
	}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for scanner.Scan() {
		lines <- bytes.Clone(scanner.Bytes())
	}
	close(lines)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return done.Load(), err
	}
	return done.Load(), scanner.Err()
}

type page struct {
	Items    []object `json:"items"`
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
}

func list(c *client, path, out string) (int64, error) {
	f, err := os.Create(out)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, 3)
	if err != nil {
		return 0, err
	}
	var count int64
	token := ""
	for {
		query := "?limit=500"
		if token != "" {
			query += "&continue=" + url.QueryEscape(token)
		}
		var p page
		if err := c.call("GET", path+query, nil, &p); err != nil {
			return count, err
		}
		for _, item := range p.Items {
			data, err := json.Marshal(item)
			if err != nil {
				return count, err
			}
			if _, err := gz.Write(data); err != nil {
				return count, err
			}
			count++
		}
		if token = p.Metadata.Continue; token == "" {
			return count, gz.Close()
		}
	}
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "write" && os.Args[1] != "list") {
		fmt.Fprintln(os.Stderr, "usage: goref write|list -server URL -token T ...")
		os.Exit(2)
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	server := flags.String("server", "", "the API server's URL")
	token := flags.String("token", "", "a bearer token")
	path := flags.String("path", "", "write: the group version's path (/apis/G/V); list: the collection's path")
	plural := flags.String("plural", "", "write: the resource's plural")
	objects := flags.String("objects", "", "write: a file of objects, one JSON per line")
	parallel := flags.Int("parallel", 16, "write: requests in flight")
	out := flags.String("out", "", "list: the gzip file to write")
	_ = flags.Parse(os.Args[2:])
	var n int64
	var err error
	if os.Args[1] == "write" {
		n, err = write(newClient(*server, *token, *parallel), *path, *plural, *objects, *parallel)
	} else {
		n, err = list(newClient(*server, *token, 1), *path, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goref:", err)
		os.Exit(1)
	}
	fmt.Printf("{\"objects\": %d}\n", n)
}
