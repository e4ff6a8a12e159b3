package server

import (
	"encoding/json"
	"reflect"
	"strings"
)

// typeErrorField names the request field a json.UnmarshalTypeError is about as the client wrote
// it, e.g. "max_tokens" where encoding/json says "openAICommon.max_tokens": encoding/json puts
// the Go name of an embedded struct into the path, which is no part of the JSON. dst is the value
// being decoded into; the path's segments are matched against its struct fields to find which
// ones are embedded.
func typeErrorField(dst any, e *json.UnmarshalTypeError) string {
	t := reflect.TypeOf(dst)
	var out []string
	for _, seg := range strings.Split(e.Field, ".") {
		t = elemType(t)
		if t == nil || t.Kind() != reflect.Struct {
			out, t = append(out, seg), nil
			continue
		}
		next, embedded := structSegment(t, seg)
		if !embedded {
			out = append(out, seg)
		}
		t = next
	}
	return strings.Join(out, ".")
}

// structSegment finds seg among t's fields: an untagged embedded struct by its Go name (embedded
// reports true), else a field by its JSON name. The type is nil when seg matches nothing.
func structSegment(t reflect.Type, seg string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Name == seg {
			return f.Type, true
		}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if name == seg {
			return f.Type, false
		}
	}
	return nil, false
}

// elemType looks through pointers, slices, arrays and maps to the type a path segment names a
// field of (encoding/json's paths carry no indices or keys).
func elemType(t reflect.Type) reflect.Type {
	for t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		default:
			return t
		}
	}
	return nil
}

// jsonKind says what JSON a Go type accepts, for messages that talk JSON to a client: "int" and
// "*float64" are both "a number".
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of type " + t.String()
}
