//go:build amd64 && !purego

#include "textflag.h"

// Hand-written AVX-512 VNNI kernels of the int8 experiment (see int8exp.go for the layout and
// the numerics). VPDPBUSD (Go operand order: s8 source, u8 source, int32 accumulator) adds, in
// each of 16 int32 lanes, the 4 products of unsigned activation bytes and signed weight bytes.

// func q8R1(w *int8, x *uint8, corr *int32, ws *float32, y *float32, groups int, np int, xs float32)
// Four panels at a time (four weight streams, as package kernel's bf16 matvec), two groups per
// step with separate accumulators for even and odd groups; then one panel at a time.
TEXT ·q8R1(SB), NOSPLIT, $0-60
	MOVQ         w+0(FP), AX
	MOVQ         x+8(FP), CX
	MOVQ         corr+16(FP), DX
	MOVQ         ws+24(FP), BX
	MOVQ         y+32(FP), SI
	MOVQ         groups+40(FP), DI
	MOVQ         np+48(FP), R8
	VBROADCASTSS xs+56(FP), Z31
	MOVQ         DI, R9
	SHLQ         $6, R9            // panel stride in bytes: groups*64
	LEAQ         (R9)(R9*2), R10   // 3 panels

r1p4:
	CMPQ   R8, $4
	JL     r1p1
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ   AX, R11
	MOVQ   CX, R12
	MOVQ   DI, R13

r1p4g:
	PREFETCHT0   1024(R11)
	PREFETCHT0   1024(R11)(R9*1)
	PREFETCHT0   1024(R11)(R9*2)
	PREFETCHT0   1024(R11)(R10*1)
	PREFETCHT0   1088(R11)
	PREFETCHT0   1088(R11)(R9*1)
	PREFETCHT0   1088(R11)(R9*2)
	PREFETCHT0   1088(R11)(R10*1)
	VPBROADCASTD (R12), Z8
	VPBROADCASTD 4(R12), Z9
	VPDPBUSD     (R11), Z8, Z0
	VPDPBUSD     (R11)(R9*1), Z8, Z1
	VPDPBUSD     (R11)(R9*2), Z8, Z2
	VPDPBUSD     (R11)(R10*1), Z8, Z3
	VPDPBUSD     64(R11), Z9, Z4
	VPDPBUSD     64(R11)(R9*1), Z9, Z5
	VPDPBUSD     64(R11)(R9*2), Z9, Z6
	VPDPBUSD     64(R11)(R10*1), Z9, Z7
	ADDQ         $128, R11
	ADDQ         $8, R12
	SUBQ         $2, R13
	JNZ          r1p4g
	VPADDD       Z4, Z0, Z0
	VPSUBD       0(DX), Z0, Z0
	VCVTDQ2PS    Z0, Z0
	VMULPS       0(BX), Z0, Z0
	VMULPS       Z31, Z0, Z0
	VMOVUPS      Z0, 0(SI)
	VPADDD       Z5, Z1, Z1
	VPSUBD       64(DX), Z1, Z1
	VCVTDQ2PS    Z1, Z1
	VMULPS       64(BX), Z1, Z1
	VMULPS       Z31, Z1, Z1
	VMOVUPS      Z1, 64(SI)
	VPADDD       Z6, Z2, Z2
	VPSUBD       128(DX), Z2, Z2
	VCVTDQ2PS    Z2, Z2
	VMULPS       128(BX), Z2, Z2
	VMULPS       Z31, Z2, Z2
	VMOVUPS      Z2, 128(SI)
	VPADDD       Z7, Z3, Z3
	VPSUBD       192(DX), Z3, Z3
	VCVTDQ2PS    Z3, Z3
	VMULPS       192(BX), Z3, Z3
	VMULPS       Z31, Z3, Z3
	VMOVUPS      Z3, 192(SI)
	LEAQ         (AX)(R9*4), AX
	ADDQ         $256, DX
	ADDQ         $256, BX
	ADDQ         $256, SI
	SUBQ         $4, R8
	JMP          r1p4

r1p1:
	TESTQ  R8, R8
	JE     r1done
	VPXORD Z0, Z0, Z0
	VPXORD Z4, Z4, Z4
	MOVQ   AX, R11
	MOVQ   CX, R12
	MOVQ   DI, R13

r1p1g:
	PREFETCHT0   1024(R11)
	PREFETCHT0   1088(R11)
	VPBROADCASTD (R12), Z8
	VPBROADCASTD 4(R12), Z9
	VPDPBUSD     (R11), Z8, Z0
	VPDPBUSD     64(R11), Z9, Z4
	ADDQ         $128, R11
	ADDQ         $8, R12
	SUBQ         $2, R13
	JNZ          r1p1g
	VPADDD       Z4, Z0, Z0
	VPSUBD       (DX), Z0, Z0
	VCVTDQ2PS    Z0, Z0
	VMULPS       (BX), Z0, Z0
	VMULPS       Z31, Z0, Z0
	VMOVUPS      Z0, (SI)
	ADDQ         R9, AX
	ADDQ         $64, DX
	ADDQ         $64, BX
	ADDQ         $64, SI
	DECQ         R8
	JMP          r1p1

r1done:
	VZEROUPPER
	RET

// func q8R16(w *int8, x *uint8, corr *int32, ws *float32, xs *float32, y *float32, ldy int, groups int, np int)
// One panel at a time, 16 accumulators (one per activation row); per group one 64-byte weight
// load, and for each row a 4-byte broadcast of its activations (rows are packed [groups][16][4]
// so the 16 broadcasts read one cache line) and one VPDPBUSD.
TEXT ·q8R16(SB), NOSPLIT, $0-72
	MOVQ w+0(FP), AX
	MOVQ x+8(FP), CX
	MOVQ corr+16(FP), DX
	MOVQ ws+24(FP), BX
	MOVQ xs+32(FP), R10
	MOVQ y+40(FP), SI
	MOVQ ldy+48(FP), R9
	MOVQ groups+56(FP), DI
	MOVQ np+64(FP), R8
	SHLQ $2, R9            // ldy in bytes

r16p:
	TESTQ R8, R8
	JE    r16done
	VPXORD       Z0, Z0, Z0
	VPXORD       Z1, Z1, Z1
	VPXORD       Z2, Z2, Z2
	VPXORD       Z3, Z3, Z3
	VPXORD       Z4, Z4, Z4
	VPXORD       Z5, Z5, Z5
	VPXORD       Z6, Z6, Z6
	VPXORD       Z7, Z7, Z7
	VPXORD       Z8, Z8, Z8
	VPXORD       Z9, Z9, Z9
	VPXORD       Z10, Z10, Z10
	VPXORD       Z11, Z11, Z11
	VPXORD       Z12, Z12, Z12
	VPXORD       Z13, Z13, Z13
	VPXORD       Z14, Z14, Z14
	VPXORD       Z15, Z15, Z15
	MOVQ         CX, R12
	MOVQ         DI, R13

r16g:
	VMOVDQU32    (AX), Z16
	PREFETCHT0   1024(AX)
	VPBROADCASTD 0(R12), Z17
	VPDPBUSD     Z16, Z17, Z0
	VPBROADCASTD 4(R12), Z18
	VPDPBUSD     Z16, Z18, Z1
	VPBROADCASTD 8(R12), Z19
	VPDPBUSD     Z16, Z19, Z2
	VPBROADCASTD 12(R12), Z20
	VPDPBUSD     Z16, Z20, Z3
	VPBROADCASTD 16(R12), Z21
	VPDPBUSD     Z16, Z21, Z4
	VPBROADCASTD 20(R12), Z22
	VPDPBUSD     Z16, Z22, Z5
	VPBROADCASTD 24(R12), Z23
	VPDPBUSD     Z16, Z23, Z6
	VPBROADCASTD 28(R12), Z24
	VPDPBUSD     Z16, Z24, Z7
	VPBROADCASTD 32(R12), Z17
	VPDPBUSD     Z16, Z17, Z8
	VPBROADCASTD 36(R12), Z18
	VPDPBUSD     Z16, Z18, Z9
	VPBROADCASTD 40(R12), Z19
	VPDPBUSD     Z16, Z19, Z10
	VPBROADCASTD 44(R12), Z20
	VPDPBUSD     Z16, Z20, Z11
	VPBROADCASTD 48(R12), Z21
	VPDPBUSD     Z16, Z21, Z12
	VPBROADCASTD 52(R12), Z22
	VPDPBUSD     Z16, Z22, Z13
	VPBROADCASTD 56(R12), Z23
	VPDPBUSD     Z16, Z23, Z14
	VPBROADCASTD 60(R12), Z24
	VPDPBUSD     Z16, Z24, Z15
	ADDQ         $64, AX
	ADDQ         $64, R12
	DECQ         R13
	JNZ          r16g
	VMOVUPS      (DX), Z25
	VMOVUPS      (BX), Z26
	MOVQ         SI, R14
	VPSUBD       Z25, Z0, Z0
	VCVTDQ2PS    Z0, Z0
	VMULPS       Z26, Z0, Z0
	VBROADCASTSS 0(R10), Z27
	VMULPS       Z27, Z0, Z0
	VMOVUPS      Z0, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z1, Z1
	VCVTDQ2PS    Z1, Z1
	VMULPS       Z26, Z1, Z1
	VBROADCASTSS 4(R10), Z27
	VMULPS       Z27, Z1, Z1
	VMOVUPS      Z1, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z2, Z2
	VCVTDQ2PS    Z2, Z2
	VMULPS       Z26, Z2, Z2
	VBROADCASTSS 8(R10), Z27
	VMULPS       Z27, Z2, Z2
	VMOVUPS      Z2, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z3, Z3
	VCVTDQ2PS    Z3, Z3
	VMULPS       Z26, Z3, Z3
	VBROADCASTSS 12(R10), Z27
	VMULPS       Z27, Z3, Z3
	VMOVUPS      Z3, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z4, Z4
	VCVTDQ2PS    Z4, Z4
	VMULPS       Z26, Z4, Z4
	VBROADCASTSS 16(R10), Z27
	VMULPS       Z27, Z4, Z4
	VMOVUPS      Z4, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z5, Z5
	VCVTDQ2PS    Z5, Z5
	VMULPS       Z26, Z5, Z5
	VBROADCASTSS 20(R10), Z27
	VMULPS       Z27, Z5, Z5
	VMOVUPS      Z5, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z6, Z6
	VCVTDQ2PS    Z6, Z6
	VMULPS       Z26, Z6, Z6
	VBROADCASTSS 24(R10), Z27
	VMULPS       Z27, Z6, Z6
	VMOVUPS      Z6, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z7, Z7
	VCVTDQ2PS    Z7, Z7
	VMULPS       Z26, Z7, Z7
	VBROADCASTSS 28(R10), Z27
	VMULPS       Z27, Z7, Z7
	VMOVUPS      Z7, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z8, Z8
	VCVTDQ2PS    Z8, Z8
	VMULPS       Z26, Z8, Z8
	VBROADCASTSS 32(R10), Z27
	VMULPS       Z27, Z8, Z8
	VMOVUPS      Z8, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z9, Z9
	VCVTDQ2PS    Z9, Z9
	VMULPS       Z26, Z9, Z9
	VBROADCASTSS 36(R10), Z27
	VMULPS       Z27, Z9, Z9
	VMOVUPS      Z9, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z10, Z10
	VCVTDQ2PS    Z10, Z10
	VMULPS       Z26, Z10, Z10
	VBROADCASTSS 40(R10), Z27
	VMULPS       Z27, Z10, Z10
	VMOVUPS      Z10, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z11, Z11
	VCVTDQ2PS    Z11, Z11
	VMULPS       Z26, Z11, Z11
	VBROADCASTSS 44(R10), Z27
	VMULPS       Z27, Z11, Z11
	VMOVUPS      Z11, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z12, Z12
	VCVTDQ2PS    Z12, Z12
	VMULPS       Z26, Z12, Z12
	VBROADCASTSS 48(R10), Z27
	VMULPS       Z27, Z12, Z12
	VMOVUPS      Z12, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z13, Z13
	VCVTDQ2PS    Z13, Z13
	VMULPS       Z26, Z13, Z13
	VBROADCASTSS 52(R10), Z27
	VMULPS       Z27, Z13, Z13
	VMOVUPS      Z13, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z14, Z14
	VCVTDQ2PS    Z14, Z14
	VMULPS       Z26, Z14, Z14
	VBROADCASTSS 56(R10), Z27
	VMULPS       Z27, Z14, Z14
	VMOVUPS      Z14, (R14)
	ADDQ         R9, R14
	VPSUBD       Z25, Z15, Z15
	VCVTDQ2PS    Z15, Z15
	VMULPS       Z26, Z15, Z15
	VBROADCASTSS 60(R10), Z27
	VMULPS       Z27, Z15, Z15
	VMOVUPS      Z15, (R14)
	ADDQ         R9, R14
	ADDQ         $64, DX
	ADDQ         $64, BX
	ADDQ         $64, SI
	DECQ         R8
	JMP          r16p

r16done:
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv() (a, d uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	XORL CX, CX
	XGETBV
	MOVL AX, a+0(FP)
	MOVL DX, d+4(FP)
	RET
