package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type tag of a metadata value, numbered as the format stores it.
type ValueType uint32

// The metadata value types of GGUF versions 2 and 3.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var typeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
	"string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("value type %d", uint32(t))
}

func (t ValueType) valid() bool { return int(t) < len(typeNames) }

// size is the encoded size of a scalar of type t, or for strings and arrays the least one can
// occupy (a string's length, an array's element type and length). The reader uses it to refuse
// a count that the rest of the file cannot hold before allocating for it.
func (t ValueType) size() uint64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64, TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return 0
}

func (t ValueType) signed() bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

func (t ValueType) unsigned() bool {
	return t == TypeUint8 || t == TypeUint16 || t == TypeUint32 || t == TypeUint64
}

// Value is one metadata value: a scalar, a string, or an array of values of one type (arrays
// may nest). The zero Value is uint8(0). Values are immutable once made.
type Value struct {
	typ  ValueType
	bits uint64 // integers (signed ones sign-extended), float bits, bool as 0/1
	str  string
	arr  *array
}

// array keeps its elements as a typed Go slice ([]uint8 ... []string, []bool, or []Value for
// nested arrays), so a 150k-token vocabulary costs a []string, not 150k Values.
type array struct {
	elem ValueType
	vals any
}

// Constructors, for building metadata to write.

func Uint8(v uint8) Value     { return Value{typ: TypeUint8, bits: uint64(v)} }
func Int8(v int8) Value       { return Value{typ: TypeInt8, bits: uint64(int64(v))} }
func Uint16(v uint16) Value   { return Value{typ: TypeUint16, bits: uint64(v)} }
func Int16(v int16) Value     { return Value{typ: TypeInt16, bits: uint64(int64(v))} }
func Uint32(v uint32) Value   { return Value{typ: TypeUint32, bits: uint64(v)} }
func Int32(v int32) Value     { return Value{typ: TypeInt32, bits: uint64(int64(v))} }
func Uint64(v uint64) Value   { return Value{typ: TypeUint64, bits: v} }
func Int64(v int64) Value     { return Value{typ: TypeInt64, bits: uint64(v)} }
func Float32(v float32) Value { return Value{typ: TypeFloat32, bits: uint64(math.Float32bits(v))} }
func Float64(v float64) Value { return Value{typ: TypeFloat64, bits: math.Float64bits(v)} }
func String(v string) Value   { return Value{typ: TypeString, str: v} }
func Bool(v bool) Value {
	if v {
		return Value{typ: TypeBool, bits: 1}
	}
	return Value{typ: TypeBool}
}

// Elem is the set of Go element types an array can be made of.
type Elem interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64
}

// Array makes an array value of the elements' type; it keeps v, which must not change after.
func Array[T Elem](v []T) Value {
	var elem ValueType
	switch any(v).(type) {
	case []uint8:
		elem = TypeUint8
	case []int8:
		elem = TypeInt8
	case []uint16:
		elem = TypeUint16
	case []int16:
		elem = TypeInt16
	case []uint32:
		elem = TypeUint32
	case []int32:
		elem = TypeInt32
	case []float32:
		elem = TypeFloat32
	case []bool:
		elem = TypeBool
	case []string:
		elem = TypeString
	case []uint64:
		elem = TypeUint64
	case []int64:
		elem = TypeInt64
	case []float64:
		elem = TypeFloat64
	}
	return Value{typ: TypeArray, arr: &array{elem: elem, vals: v}}
}

// Arrays makes an array of arrays. The format allows the inner arrays to differ in element
// type and length; every element must be an array value or the writer refuses it.
func Arrays(v ...Value) Value {
	return Value{typ: TypeArray, arr: &array{elem: TypeArray, vals: v}}
}

// Type is the value's type tag.
func (v Value) Type() ValueType { return v.typ }

// Elem is an array's element type (meaningless for other values).
func (v Value) Elem() ValueType {
	if v.arr == nil {
		return 0
	}
	return v.arr.elem
}

// Len is an array's number of elements, a string's bytes, 0 otherwise.
func (v Value) Len() int {
	switch {
	case v.typ == TypeString:
		return len(v.str)
	case v.arr != nil:
		return arrayLen(v.arr.vals)
	}
	return 0
}

func arrayLen(vals any) int {
	switch s := vals.(type) {
	case []uint8:
		return len(s)
	case []int8:
		return len(s)
	case []uint16:
		return len(s)
	case []int16:
		return len(s)
	case []uint32:
		return len(s)
	case []int32:
		return len(s)
	case []float32:
		return len(s)
	case []bool:
		return len(s)
	case []string:
		return len(s)
	case []uint64:
		return len(s)
	case []int64:
		return len(s)
	case []float64:
		return len(s)
	case []Value:
		return len(s)
	}
	return 0
}

// Any is the value as a Go value: uint8 ... float64, bool, string, or for arrays the typed
// slice ([]string, []int32, ..., []Value for nested arrays). Slices must not be modified.
func (v Value) Any() any {
	switch v.typ {
	case TypeUint8:
		return uint8(v.bits)
	case TypeInt8:
		return int8(v.bits)
	case TypeUint16:
		return uint16(v.bits)
	case TypeInt16:
		return int16(v.bits)
	case TypeUint32:
		return uint32(v.bits)
	case TypeInt32:
		return int32(v.bits)
	case TypeUint64:
		return v.bits
	case TypeInt64:
		return int64(v.bits)
	case TypeFloat32:
		return math.Float32frombits(uint32(v.bits))
	case TypeFloat64:
		return math.Float64frombits(v.bits)
	case TypeBool:
		return v.bits != 0
	case TypeString:
		return v.str
	case TypeArray:
		if v.arr != nil {
			return v.arr.vals
		}
	}
	return nil
}

// kind describes the value's type for error messages: "uint32", "array of string".
func (v Value) kind() string {
	if v.typ == TypeArray && v.arr != nil {
		return "array of " + v.arr.elem.String()
	}
	return v.typ.String()
}

// String formats the value for messages and listings; long arrays and strings are elided.
func (v Value) String() string {
	switch v.typ {
	case TypeString:
		if len(v.str) > 64 {
			return fmt.Sprintf("%q... (%d bytes)", v.str[:64], len(v.str))
		}
		return fmt.Sprintf("%q", v.str)
	case TypeArray:
		if n := v.Len(); n > 8 {
			return fmt.Sprintf("[%d x %s]", n, v.arr.elem)
		}
		return fmt.Sprint(v.Any())
	}
	return fmt.Sprint(v.Any())
}

// uintValue is v as an unsigned integer: any unsigned type, or a signed one that is not
// negative (writers disagree on whether counts are uint32, int32 or uint64).
func (v Value) uintValue() (uint64, bool) {
	switch {
	case v.typ.unsigned():
		return v.bits, true
	case v.typ.signed() && int64(v.bits) >= 0:
		return v.bits, true
	}
	return 0, false
}

// intValue is v as a signed integer: any signed type, or an unsigned one that fits.
func (v Value) intValue() (int64, bool) {
	switch {
	case v.typ.signed():
		return int64(v.bits), true
	case v.typ.unsigned() && v.bits <= math.MaxInt64:
		return int64(v.bits), true
	}
	return 0, false
}
