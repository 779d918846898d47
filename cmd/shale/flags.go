package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/cli"
)

// Flag value types. A bad value fails the parse with pflag's
// `invalid argument "8XB" for "--cache-size" flag: <what to write instead>`
// and exit status 2.

// sizeValue is a byte size: plain bytes or a number with KiB, MiB or GiB.
type sizeValue[T int | int64 | uint64] struct{ p *T }

func newSize[T int | int64 | uint64](p *T, def T) sizeValue[T] {
	*p = def
	return sizeValue[T]{p}
}

func (s sizeValue[T]) String() string {
	if s.p == nil {
		return "0"
	}
	return cli.FormatSize(uint64(*s.p))
}

func (s sizeValue[T]) Set(v string) error {
	n, err := cli.ParseSize(v)
	if err != nil {
		return err
	}
	*s.p = T(n)
	return nil
}

func (sizeValue[T]) Type() string { return "size" }

// durationValue is a positive duration. Zero would silently mean the
// built-in default in the storage layer, and a negative one means nothing.
type durationValue struct{ p *time.Duration }

func newDuration(p *time.Duration, def time.Duration) durationValue {
	*p = def
	return durationValue{p}
}

func (d durationValue) String() string {
	if d.p == nil {
		return "0s"
	}
	return cli.FormatDuration(*d.p)
}

func (d durationValue) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("want a duration such as 500ms, 30s, 5m or 1h")
	}
	if x <= 0 {
		return fmt.Errorf("must be positive (a duration such as 500ms, 30s, 5m or 1h)")
	}
	*d.p = x
	return nil
}

func (durationValue) Type() string { return "duration" }

// offDurationValue is a duration flag where 0 means "off".
type offDurationValue struct{ durationValue }

func (d offDurationValue) Set(v string) error {
	if x, err := time.ParseDuration(v); err == nil && x == 0 {
		*d.p = 0
		return nil
	}
	if err := d.durationValue.Set(v); err != nil {
		return fmt.Errorf("must be 0 (off) or positive (a duration such as 2ms)")
	}
	return nil
}

// uintValue is a non-negative integer, with a friendlier error than
// strconv's.
type uintValue struct{ p *uint64 }

func (u uintValue) String() string {
	if u.p == nil {
		return "0"
	}
	return strconv.FormatUint(*u.p, 10)
}

func (u uintValue) Set(v string) error {
	x, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number >= 0")
	}
	*u.p = x
	return nil
}

func (uintValue) Type() string { return "uint" }

// outputFormat is the value of -o/--output.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (o *outputFormat) String() string { return string(*o) }

func (o *outputFormat) Set(v string) error {
	switch f := outputFormat(v); f {
	case outputText, outputJSON:
		*o = f
		return nil
	}
	return errors.New(`want "text" or "json"`)
}

func (*outputFormat) Type() string { return "format" }

// addOutputFlags adds -o/--output and the deprecated --json (same as
// -o json) to c, and returns a function that tells which was chosen.
func addOutputFlags(c *cobra.Command) func() outputFormat {
	o := outputText
	var asJSON bool
	c.Flags().VarP(&o, "output", "o", "output `format`: text or json")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]cobra.Completion{string(outputText), string(outputJSON)}, cobra.ShellCompDirectiveNoFileComp))
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().MarkDeprecated("json", "use -o json")
	return func() outputFormat {
		if asJSON {
			return outputJSON
		}
		return o
	}
}

// printJSON writes v as indented JSON, without escaping <, > and &.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// compactJSON is v as one line of JSON, without escaping <, > and &.
func compactJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
