/* et_kernel_abi.h - the contract between Opal's ET-SoC-1 host code and its device kernels.
 *
 * Plain C (C11 on the device, C++20 on the host): fixed-width fields only, every struct a
 * multiple of 64 bytes (one cache line) and checked with static asserts on both sides.
 *
 * Launch (what a driver does, what the device sees):
 *   1. The host writes the argument blob (an Et*Args struct below, starting with EtArgsHeader)
 *      to device memory it allocated (64-byte aligned, at or above ET_HEAP_BASE).
 *   2. sysemu driver only (the card's firmware does this itself): the host writes an EtLaunch
 *      record at ET_LAUNCH_ADDR and starts the enabled harts at ET_BOOT_ENTRY (the "boot"
 *      image, our stand-in for the firmware). Every hart: FPU on, masks m0..m7 = 0xFF, mtvec
 *      = the trap handler, shadow CSRs on (U-mode may read the hart id CSR 0xcd0), cycle
 *      counter readable from U-mode, U stack, then `mret` into U-mode at EtLaunch.entry_pc with
 *      a0 = args blob, a1 = the hart's EtEnv (the top 64 bytes of its U stack; the stack pointer
 *      starts below it). A kernel may use ET_USTACK_SIZE - 128 bytes of stack.
 *   3. The kernel image's _start (at ET_KERNEL_ENTRY) reads EtArgsHeader.kernel_id, finds the
 *      entry in its table (section .et_kernel_table, EtKernelEntry) and calls
 *      `int64_t entry(const void* args, const EtEnv* env)` on every hart (SPMD). The hart's
 *      rank among the enabled harts is et_hart_rank() with the masks in EtArgsHeader (not the
 *      environment: its layout belongs to the firmware).
 *   4. The entry returns 0 (ET_STATUS_OK) or a failure: (detail << 32) | status. _start passes
 *      it to `ecall`. The boot stub then evicts the hart's L1 data cache to memory (EvictSW of
 *      all sets and ways, then waits), writes the hart's EtHartRecord at ET_HART_RECORD_ADDR +
 *      hart id * 64 and signals the emulator: validation0 = ET_SIGNAL_PASS on success (the hart
 *      stops), ET_SIGNAL_FAIL otherwise (the emulation stops).
 *   5. A trap in the kernel (illegal or unimplemented instruction: mcause 30 for fdiv.s and
 *      friends, access fault, ...) enters the same handler, which records mcause, mepc, mtval and
 *      the hart id with status ET_STATUS_TRAP and signals FAIL.
 *   The host reads the records of the enabled harts: all must carry the launch's launch_id and
 *   ET_STATUS_OK; any other names the failing hart, the status and (for traps) the cause.
 *
 * Hart numbering: hart id = shire * 64 + minion * 2 + thread (CSR 0xcd0 in U-mode, mhartid in
 * M-mode). The enabled harts are the shires in shire_mask x the minions in minion_mask x
 * threads (1: thread 0 only, 2: both). Kernels split work by rank (0 .. n_harts - 1) and write
 * whole 64-byte lines per minion (two minions never write the same line: the coherence rule).
 *
 * Tensors: EtTensor, ggml/GGUF layout and Opal DType numbering (F32 0, F16 1, Q4_0 2, Q8_0 8,
 * Q4_K 12, I32 26); ne[] counts elements (ne[0] innermost), nb[] strides in bytes (nb[0] the
 * element or block size). Block layouts exactly as GGUF (see backends/cpu kernels).
 */
#ifndef OPAL_ET_KERNEL_ABI_H
#define OPAL_ET_KERNEL_ABI_H

/* The address constants are also read by the boot stub's assembler (no C below for it). */
#ifdef __ASSEMBLER__
#define ET_U64(x) x
#else
#define ET_U64(x) x##ull
#include <stdint.h>
#endif

#define ET_ABI_VERSION 1u
#define ET_LAUNCH_MAGIC 0x5445504fu /* "OPET" */

/* ---- memory map (bare metal: virtual = physical) ------------------------------------------ */
#define ET_DRAM_BASE ET_U64(0x8000000000)
#define ET_BOOT_ENTRY ET_U64(0x8000001000)       /* boot image (M-mode), the emulator's reset PC     */
#define ET_LAUNCH_ADDR ET_U64(0x8000100000)      /* EtLaunch, written by the host before each launch */
#define ET_HART_RECORD_ADDR ET_U64(0x8000200000) /* EtHartRecord[ET_MAX_HARTS], one line per hart    */
#define ET_MSTACK_TOP ET_U64(0x8000800000)       /* M-mode trap stacks, ET_MSTACK_SIZE per hart, down */
#define ET_MSTACK_SIZE ET_U64(0x400)
#define ET_M_ONLY_END ET_U64(0x8000800000)   /* U-mode may not touch [ET_DRAM_BASE, this)         */
#define ET_KERNEL_ENTRY ET_U64(0x8005801000) /* kernel image (U-mode), _start                     */
#define ET_KERNEL_END ET_U64(0x8006000000)   /* the image must end below this                      */
#define ET_USTACK_TOP ET_U64(0x8010000000)   /* U-mode stacks, ET_USTACK_SIZE per hart, down; the */
#define ET_USTACK_SIZE ET_U64(0x10000)       /*   hart's EtEnv in the top 64 bytes of its stack    */
#define ET_HEAP_BASE ET_U64(0x8010000000)    /* device allocations (tensors, argument blobs)      */
#define ET_HEAP_END ET_U64(0x8400000000)     /* 16 GiB of emulated DRAM                            */

#define ET_MAX_SHIRES 34u
#define ET_HARTS_PER_SHIRE 64u
#define ET_MAX_HARTS (ET_MAX_SHIRES * ET_HARTS_PER_SHIRE)
#define ET_LINE_BYTES 64u

/* Emulator end-of-run signals (CSR validation0). */
#define ET_SIGNAL_PASS 0x1FEED000u
#define ET_SIGNAL_FAIL 0x50BAD000u

#ifndef __ASSEMBLER__

#ifdef __cplusplus
#define ET_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
extern "C" {
#else
#define ET_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ---- status codes (EtHartRecord.status, low 32 bits of a kernel's return value) ------------ */
enum EtStatus {
  ET_STATUS_OK = 0,
  ET_STATUS_BAD_ABI = 1,         /* header abi_version != ET_ABI_VERSION; detail = the version     */
  ET_STATUS_NO_KERNEL = 2,       /* kernel_id not in this image; detail = the id                   */
  ET_STATUS_BAD_TYPE = 3,        /* a tensor's dtype is not handled; detail = tensor index          */
  ET_STATUS_BAD_SHAPE = 4,       /* shapes/strides the kernel cannot handle; detail = tensor index  */
  ET_STATUS_BAD_INDEX = 5,       /* an index tensor (row id, position, cell) out of range; detail = i */
  ET_STATUS_BAD_ALIGN = 6,       /* an address not aligned as required; detail = tensor index       */
  ET_STATUS_TRAP = 7,            /* set by the trap handler: see mcause/mepc/mtval                  */
  ET_STATUS_BAD_LAUNCH = 8,      /* EtLaunch magic/version wrong (boot stub)                        */
  ET_STATUS_BARRIER_TIMEOUT = 9, /* FUSED: a barrier waited past its budget; detail = the entry      */
  ET_STATUS_BAD_ENTRY = 10,      /* FUSED: a command-list entry it cannot run; detail = the entry    */
  ET_STATUS_TENSOR_ERROR = 11,   /* the tensor unit flagged an error (no scratchpad, bad operation, a
                                    fault); detail = the tensor_error CSR                             */
  ET_STATUS_NOT_RUN = 0xffffu,   /* host-side: the hart left no record for this launch              */
};

/* mcause of an instruction ET-SoC-1 does not implement (fdiv.s, fsqrt.s, ...). */
#define ET_MCAUSE_NOT_IMPLEMENTED 30u

/* ---- host -> boot stub ------------------------------------------------------------------- */
typedef struct EtLaunch {
  uint32_t magic;       /* ET_LAUNCH_MAGIC                                                 */
  uint32_t abi_version; /* ET_ABI_VERSION                                                  */
  uint64_t entry_pc;    /* U-mode entry, normally ET_KERNEL_ENTRY                           */
  uint64_t args;        /* device address of the argument blob (passed in a0)               */
  uint64_t launch_id;   /* copied into every EtHartRecord of this launch (nonzero)          */
  uint64_t shire_mask;  /* enabled shires (same as the emulator's)                          */
  uint32_t minion_mask; /* enabled minions in each shire                                    */
  uint32_t threads;     /* 1 (thread 0 of each minion) or 2                                 */
  uint32_t freq_mhz;    /* copied into EtEnv                                                */
  uint32_t flags;       /* reserved, 0                                                      */
  uint64_t reserved;
} EtLaunch;
ET_STATIC_ASSERT(sizeof(EtLaunch) == 64, "EtLaunch is one line");

/* ---- boot stub -> kernel (a1) ------------------------------------------------------------- */
typedef struct EtEnv {
  uint32_t version; /* ET_ABI_VERSION */
  uint32_t freq_mhz;
  uint64_t shire_mask;
  uint32_t minion_mask;
  uint32_t threads;
  uint64_t launch_id;
  uint64_t reserved[4];
} EtEnv;
ET_STATIC_ASSERT(sizeof(EtEnv) == 64, "EtEnv is one line");

/* ---- boot stub -> host: one record per hart at ET_HART_RECORD_ADDR + hart * 64 ------------ */
typedef struct EtHartRecord {
  uint64_t launch_id; /* EtLaunch.launch_id of the launch that wrote it                      */
  uint32_t status;    /* EtStatus                                                            */
  uint32_t detail;    /* kernel-provided detail (high half of the return value)              */
  uint64_t mcause;    /* traps only                                                          */
  uint64_t mepc;      /* traps only: the faulting pc                                          */
  uint64_t mtval;     /* traps only: instruction bits or address                              */
  uint64_t cycles;    /* cycles from U-mode entry to the end (hpmcounter3, see et_cycles)     */
  uint64_t hart;      /* hart id                                                              */
  uint64_t reserved;
} EtHartRecord;
ET_STATIC_ASSERT(sizeof(EtHartRecord) == 64, "EtHartRecord is one line");

/* ---- kernel image: entry table (section .et_kernel_table) --------------------------------- */
typedef struct EtKernelEntry {
  uint32_t kernel_id;
  uint32_t reserved;
  uint64_t fn; /* int64_t (*)(const void* args, const EtEnv* env) */
} EtKernelEntry;
ET_STATIC_ASSERT(sizeof(EtKernelEntry) == 16, "EtKernelEntry is 16 bytes");

/* Kernel ids. Names (et_kernel_name) are what perf events show. */
enum EtKernelId {
  ET_K_NONE = 0,
  ET_K_ADD_F32 = 1,
  ET_K_MUL_F32 = 2,
  ET_K_RMS_NORM_F32 = 3,
  ET_K_SILU_F32 = 4,
  ET_K_SWIGLU_F32 = 5,
  ET_K_DIV_F32 = 6,
  ET_K_SCALE_F32 = 7,
  ET_K_CPY_F32 = 8, /* f32 rows -> f32 or f16 (the dst's type) */
  ET_K_MUL_MAT_F32 = 10,
  ET_K_MUL_MAT_F16 = 11,
  ET_K_MUL_MAT_Q8_0 = 12,
  ET_K_MUL_MAT_Q4_0 = 13,
  ET_K_MUL_MAT_Q4_K = 14,
  ET_K_MUL_MAT_Q6_K = 15,
  ET_K_MUL_MAT_TU_Q8_0 = 16, /* through the tensor unit (int8 TensorFMA); the launch needs the L1 scratchpad */
  ET_K_MUL_MAT_TU_Q4_0 = 17,
  ET_K_MUL_MAT_TU_F16 = 18, /* through the tensor unit (fp16 TensorFMA, fp32 accumulation) */
  ET_K_MUL_MAT_ID_F32 = 20,
  ET_K_MUL_MAT_ID_F16 = 21,
  ET_K_MUL_MAT_ID_Q8_0 = 22,
  ET_K_MUL_MAT_ID_Q4_0 = 23,
  ET_K_MUL_MAT_ID_Q4_K = 24,
  ET_K_MUL_MAT_ID_Q6_K = 25,
  ET_K_GET_ROWS_F32 = 30,
  ET_K_GET_ROWS_F16 = 31,
  ET_K_GET_ROWS_Q8_0 = 32,
  ET_K_GET_ROWS_Q4_0 = 33,
  ET_K_GET_ROWS_Q4_K = 34,
  ET_K_GET_ROWS_Q6_K = 35,
  ET_K_ROPE_F32 = 40,
  ET_K_ATTENTION_F16 = 50, /* f16 KV cache */
  ET_K_ATTENTION_F32 = 51, /* f32 KV cache */
  ET_K_KV_STORE_F16 = 60,  /* f32 rows -> f16 cache */
  ET_K_KV_STORE_F32 = 61,  /* f32 rows -> f32 cache */
  ET_K_SOFTMAX_F32 = 70,
  ET_K_SUM_ROWS_F32 = 71,
  ET_K_TOP_K_F32 = 72,
  ET_K_FUSED = 80,       /* the fused dispatcher: a command list of sub-ops in one launch (EtFusedArgs) */
  ET_K_TEST_MATH = 90,   /* test only: math helpers over an array (EtTestMathArgs)  */
  ET_K_TEST_FAULT = 91,  /* test only: reports a failure / traps (EtTestFaultArgs)  */
  ET_K_TEST_TENSOR = 92, /* test only: one tensor-unit tile (EtTestTensorArgs)  */
  ET_K_COUNT = 93
};

static inline const char* et_kernel_name(uint32_t id) {
  switch (id) {
    case ET_K_ADD_F32: return "add_f32";
    case ET_K_MUL_F32: return "mul_f32";
    case ET_K_RMS_NORM_F32: return "rms_norm_f32";
    case ET_K_SILU_F32: return "silu_f32";
    case ET_K_SWIGLU_F32: return "swiglu_f32";
    case ET_K_DIV_F32: return "div_f32";
    case ET_K_SCALE_F32: return "scale_f32";
    case ET_K_CPY_F32: return "cpy_f32";
    case ET_K_MUL_MAT_F32: return "mul_mat_f32";
    case ET_K_MUL_MAT_F16: return "mul_mat_f16";
    case ET_K_MUL_MAT_Q8_0: return "mul_mat_q8_0";
    case ET_K_MUL_MAT_Q4_0: return "mul_mat_q4_0";
    case ET_K_MUL_MAT_Q4_K: return "mul_mat_q4_k";
    case ET_K_MUL_MAT_Q6_K: return "mul_mat_q6_k";
    case ET_K_MUL_MAT_TU_Q8_0: return "mul_mat_tu_q8_0";
    case ET_K_MUL_MAT_TU_Q4_0: return "mul_mat_tu_q4_0";
    case ET_K_MUL_MAT_TU_F16: return "mul_mat_tu_f16";
    case ET_K_MUL_MAT_ID_F32: return "mul_mat_id_f32";
    case ET_K_MUL_MAT_ID_F16: return "mul_mat_id_f16";
    case ET_K_MUL_MAT_ID_Q8_0: return "mul_mat_id_q8_0";
    case ET_K_MUL_MAT_ID_Q4_0: return "mul_mat_id_q4_0";
    case ET_K_MUL_MAT_ID_Q4_K: return "mul_mat_id_q4_k";
    case ET_K_MUL_MAT_ID_Q6_K: return "mul_mat_id_q6_k";
    case ET_K_GET_ROWS_F32: return "get_rows_f32";
    case ET_K_GET_ROWS_F16: return "get_rows_f16";
    case ET_K_GET_ROWS_Q8_0: return "get_rows_q8_0";
    case ET_K_GET_ROWS_Q4_0: return "get_rows_q4_0";
    case ET_K_GET_ROWS_Q4_K: return "get_rows_q4_k";
    case ET_K_GET_ROWS_Q6_K: return "get_rows_q6_k";
    case ET_K_ROPE_F32: return "rope_f32";
    case ET_K_ATTENTION_F16: return "attention_f16";
    case ET_K_ATTENTION_F32: return "attention_f32";
    case ET_K_KV_STORE_F16: return "kv_store_f16";
    case ET_K_KV_STORE_F32: return "kv_store_f32";
    case ET_K_SOFTMAX_F32: return "softmax_f32";
    case ET_K_SUM_ROWS_F32: return "sum_rows_f32";
    case ET_K_TOP_K_F32: return "top_k_f32";
    case ET_K_FUSED: return "fused";
    case ET_K_TEST_MATH: return "test_math";
    case ET_K_TEST_FAULT: return "test_fault";
    case ET_K_TEST_TENSOR: return "test_tensor";
    default: return 0;
  }
}

/* ---- argument blobs ------------------------------------------------------------------------ */
/* Every blob starts with this header. The masks must equal the launch's (kernels derive their
 * rank and the hart count from them). scratch / scratch_bytes: optional device memory for
 * cross-hart reductions and barriers (64-byte aligned, ZEROED by the host before each launch
 * that passes it); 0 = none. Only RMS_NORM uses it in ABI version 1: with fewer rows than
 * harts and scratch_bytes >= 64 * (2 * harts + 1) it splits each row over all harts (global
 * atomics, see norm.c); without scratch it runs one hart per row. */
/* EtArgsHeader.flags: ET_ARGS_SCP_ON_ENTRY: the device code turns the L1 scratchpad on itself at
 * entry (ucache_control ScpEnable on every even hart, once per launch; the firmware has put the
 * L1 in split mode) and off before it returns: how a card's launch gets the scratchpad (the
 * etrt driver sets it for tensor-unit launches). On the emulator the driver sets the scratchpad
 * up as the firmware and leaves it clear (enabling the scratchpad twice hangs the chip). */
#define ET_ARGS_SCP_ON_ENTRY 1u
typedef struct EtArgsHeader {
  uint32_t abi_version; /* ET_ABI_VERSION */
  uint32_t kernel_id;   /* EtKernelId     */
  uint64_t shire_mask;
  uint32_t minion_mask;
  uint32_t threads;    /* 1 or 2 */
  uint32_t blob_bytes; /* sizeof the whole Et*Args struct */
  uint32_t flags;      /* ET_ARGS_* */
  uint64_t scratch;
  uint64_t scratch_bytes;
  uint64_t reserved[2];
} EtArgsHeader;
ET_STATIC_ASSERT(sizeof(EtArgsHeader) == 64, "EtArgsHeader is one line");

typedef struct EtTensor {
  uint64_t addr;  /* device address of element [0,0,0,0]; 0 = absent (optional sources) */
  uint32_t type;  /* Opal DType value (ggml numbering)                                   */
  uint32_t flags; /* reserved, 0                                                         */
  int32_t ne[4];
  uint64_t nb[4];
} EtTensor;
ET_STATIC_ASSERT(sizeof(EtTensor) == 64, "EtTensor is one line");

#define ET_TYPE_F32 0u
#define ET_TYPE_F16 1u
#define ET_TYPE_Q4_0 2u
#define ET_TYPE_Q8_0 8u
#define ET_TYPE_Q4_K 12u
#define ET_TYPE_Q6_K 14u
#define ET_TYPE_I32 26u

/* ADD, MUL (graph Op::Add / Op::Mul): dst = a (op) b, F32; b broadcasts: each ne[i] of b divides
 * a's, b index = dst index mod b.ne. Rows (ne[0]) of a, b and dst contiguous (nb[0] = 4). */
typedef struct EtBinaryArgs {
  EtArgsHeader h;
  EtTensor a, b, dst;
} EtBinaryArgs;
ET_STATIC_ASSERT(sizeof(EtBinaryArgs) == 256, "EtBinaryArgs size");

/* DIV (Op::Div) takes EtBinaryArgs as ADD / MUL: dst = a / b (et_divf, within 1 ulp of the
 * correctly rounded quotient). */

/* SCALE (Op::Scale): dst = src * scale, F32, same shapes, rows contiguous. */
typedef struct EtScaleArgs {
  EtArgsHeader h;
  EtTensor src, dst;
  float scale;
  uint32_t reserved[15];
} EtScaleArgs;
ET_STATIC_ASSERT(sizeof(EtScaleArgs) == 256, "EtScaleArgs size");

/* CPY (Op::Cpy) takes EtUnaryArgs: src F32 rows (nb[0] = 4), dst F32 or F16 (round to nearest
 * even, as the CPU), same shape, dst contiguous. */

/* SOFTMAX (Op::Softmax) and SUM_ROWS (Op::SumRows) take EtUnaryArgs: F32 rows, contiguous
 * (nb[0] = 4), dst contiguous. SOFTMAX: dst row = e^(x - max) / sum (et_math.h's exp and
 * reciprocal, the sum in f32). SUM_ROWS: dst [1, rows] = the row sums (f32, 8 lanes). */

/* TOP_K (Op::TopK): src F32 [n, rows] (n <= 4096), dst I32 [k, rows] = the indices of the k
 * largest values of each row, largest first, equal values by the lower index first (as the CPU
 * op's partial sort). */
typedef struct EtTopKArgs {
  EtArgsHeader h;
  EtTensor src, dst;
  int32_t k;
  uint32_t reserved[15];
} EtTopKArgs;
ET_STATIC_ASSERT(sizeof(EtTopKArgs) == 256, "EtTopKArgs size");

/* SILU: dst = x * sigmoid(x). SWIGLU: dst = silu(a) * b. F32, same shapes, rows contiguous. */
typedef struct EtUnaryArgs {
  EtArgsHeader h;
  EtTensor src, dst;
} EtUnaryArgs;
ET_STATIC_ASSERT(sizeof(EtUnaryArgs) == 192, "EtUnaryArgs size");

typedef EtBinaryArgs EtSwigluArgs; /* a = gate (silu), b = up */

/* RMS_NORM: dst row = src row / sqrt(mean(src row^2) + eps), F32. */
typedef struct EtRmsNormArgs {
  EtArgsHeader h;
  EtTensor src, dst;
  float eps;
  uint32_t reserved[15];
} EtRmsNormArgs;
ET_STATIC_ASSERT(sizeof(EtRmsNormArgs) == 256, "EtRmsNormArgs size");

/* MUL_MAT (Op::MulMat): w [K, N, B] (F32/F16/Q8_0/Q4_0/Q4_K/Q6_K, rows contiguous), x F32 [K, T, B'],
 * dst F32 [N, T, B'] with B' a multiple of B (w batch = dst batch / (B'/B)).
 * dst[n, t, b] = sum_k w[k, n, b / (B'/B)] * x[k, t, b]. Quantized w: x is quantized to Q8_0
 * (Q8_K for Q4_K / Q6_K) per block as the CPU reference does. */
typedef struct EtMulMatArgs {
  EtArgsHeader h;
  EtTensor w, x, dst;
} EtMulMatArgs;
ET_STATIC_ASSERT(sizeof(EtMulMatArgs) == 256, "EtMulMatArgs size");

/* MUL_MAT_ID (Op::MulMatId): w experts [K, N, E], x F32 [K, S, T] (S = 1 or n_used), ids I32
 * [n_used, T] -> dst F32 [N, n_used, T]: dst[:, j, t] = W[ids[j, t]] x[:, j % S, t]. */
typedef struct EtMulMatIdArgs {
  EtArgsHeader h;
  EtTensor w, x, ids, dst;
} EtMulMatIdArgs;
ET_STATIC_ASSERT(sizeof(EtMulMatIdArgs) == 320, "EtMulMatIdArgs size");

/* GET_ROWS (Op::GetRows): table [K, R, B] (F32/F16/Q8_0/Q4_0/Q4_K/Q6_K), ids I32 [n, B] -> dst F32
 * [K, n, B]; an id outside [0, R) gives a row of zeros (as the CPU op). */
typedef struct EtGetRowsArgs {
  EtArgsHeader h;
  EtTensor table, ids, dst;
} EtGetRowsArgs;
ET_STATIC_ASSERT(sizeof(EtGetRowsArgs) == 256, "EtGetRowsArgs size");

/* ROPE (Op::Rope): src F32 [D, H, T], pos I32 [T], freq_factors F32 [n_rot/2] (addr 0: none),
 * dst F32 [D, H, T]. mode 0 = normal (pairs 2i, 2i+1), 2 = NeoX (pairs i, i + n_rot/2); dims
 * >= n_rot are copied. The angles follow graph/rope.h (rope_cos_sin) step by step, with the
 * values the host computes once (graph/rope.h RopeParams):
 *   theta_scale = powf(freq_base, -2.0f / n_rot) (as rope_cos_sin computes it);
 *   mscale = attn_factor, times (1 + 0.1 ln(1/freq_scale)) when ext_factor != 0, 1 for a key shift;
 *   theta_extrap(i) = pos * theta_scale^i (iterated in float), te = theta_extrap / ff[i],
 *   theta = freq_scale * te, YaRN-mixed with te when ext_factor != 0 (corr_low / corr_high).
 * Division and sin/cos come from et_math.h (1 ulp / 1.2e-7 absolute). */
typedef struct EtRopeArgs {
  EtArgsHeader h;
  EtTensor src, pos, freq_factors, dst;
  int32_t n_rot;
  int32_t mode;
  float theta_scale;
  float freq_scale;
  float ext_factor;
  float mscale;
  int32_t corr_low;
  int32_t corr_high;
  uint32_t reserved[8];
} EtRopeArgs;
ET_STATIC_ASSERT(sizeof(EtRopeArgs) == 384, "EtRopeArgs size");

/* ATTENTION (Op::Attention): q F32 [Dk, Hq, T]; k cache [Dk*Hkv, n_cells] and v cache
 * [Dv*Hkv, n_cells] (F16 for ATTENTION_F16, F32 for ATTENTION_F32); tokens I32 [2, T] =
 * (pos, seq); cells I32 [2, n_cells] = (pos, seq), seq -1 empty. Token t attends to every cell
 * with its seq and pos <= its pos. dst F32 [Dv*Hq, T]. Head h of q uses kv head h / (Hq/Hkv).
 * With an F16 cache, q and the softmax probabilities are rounded to f16 before the products. */
typedef struct EtAttentionArgs {
  EtArgsHeader h;
  EtTensor q, k, v, tokens, cells, dst;
  int32_t n_head_kv;
  float scale;
  uint32_t reserved[14];
} EtAttentionArgs;
ET_STATIC_ASSERT(sizeof(EtAttentionArgs) == 512, "EtAttentionArgs size");

/* KV_STORE (Op::KvStore): cache [E, n_cells] (F16 / F32), src F32 [E, T], cells I32 [T]:
 * cache[:, cells[t]] = convert(src[:, t]); a cell outside [0, n_cells) is skipped (as the CPU op).
 * E * element size must be a multiple of 64 bytes (whole lines per cell). */
typedef struct EtKvStoreArgs {
  EtArgsHeader h;
  EtTensor cache, src, cells;
} EtKvStoreArgs;
ET_STATIC_ASSERT(sizeof(EtKvStoreArgs) == 256, "EtKvStoreArgs size");

/* FUSED (the "uberkernel", fused.c): every hart of the launch walks one command list of
 * EtFusedEntry in order. A SUB_OP entry points at an ordinary Et*Args blob (any kernel of the
 * image but FUSED itself); the masks in that blob's header name the harts that run it (a subset
 * of the launch's; the others skip it), so a sub-op splits its work exactly as its own launch
 * would. The host separates sub-ops that touch the same 64-byte lines (one writes what another
 * reads or writes) by phases, and ends each phase with the discipline a kernel boundary gives
 * (docs/backends/et.md "Fused dispatch"):
 *   EVICT   every hart writes back and invalidates [addr, addr + bytes) from its minion's L1
 *           (EvictVA to evict_level: L2 within one shire, L3 across shires). The host lists
 *           every non-weight byte the phase read or wrote, so no dirty line stays in an L1 and
 *           no L1 keeps a copy of a line a later phase may rewrite (the planner reuses memory);
 *   BARRIER fence, then arrive: amoaddg.w on the counter (sync line 0, never reset in a launch:
 *           the b-th barrier is passed at b * harts arrivals); then global reads (amoorg.w) of
 *           the counter until it is passed, at most barrier_budget cycles: else
 *           ET_STATUS_BARRIER_TIMEOUT with detail = the entry.
 * Per rank r the sync area holds EtFusedHart at sync + 64 * (1 + r) (global stores): the entry
 * the hart is in and the barriers it arrived at, so the host can name the sub-op, its node and
 * the hart that failed or never arrived. stats (optional, zeroed): one line per entry, [0] =
 * the cycles every hart spent in it summed (amoaddg.d): the emulated instructions of a sub-op
 * (one per hart per cycle), the eviction or spinning of the others. The host zeroes sync and
 * stats. */
enum EtFusedKind { ET_FUSED_SUB_OP = 1, ET_FUSED_BARRIER = 2, ET_FUSED_EVICT = 3 };
typedef struct EtFusedEntry {
  uint32_t kind; /* EtFusedKind                                                          */
  uint32_t node; /* the host's index of the graph node (errors only)                      */
  uint64_t args; /* SUB_OP: device address of the sub-op's Et*Args blob (64-byte aligned)  */
  uint64_t addr; /* EVICT: the bytes to write back and invalidate                          */
  uint64_t bytes;
  uint64_t reserved[4];
} EtFusedEntry;
ET_STATIC_ASSERT(sizeof(EtFusedEntry) == 64, "EtFusedEntry is one line");

typedef struct EtFusedHart {
  uint32_t entry;   /* 1 + the entry this hart is in (0: none yet)  */
  uint32_t arrived; /* barriers this hart arrived at                */
  uint32_t reserved[14];
} EtFusedHart;
ET_STATIC_ASSERT(sizeof(EtFusedHart) == 64, "EtFusedHart is one line");

typedef struct EtFusedArgs {
  EtArgsHeader h;          /* masks: every hart of the launch                          */
  uint64_t entries;        /* device address of EtFusedEntry[count]                    */
  uint32_t count;          /* entries                                                  */
  uint32_t evict_level;    /* ET_CACHE_L2 (1) or ET_CACHE_L3 (2), et_insn.h            */
  uint64_t sync;           /* 64 * (1 + harts) zeroed bytes                            */
  uint64_t stats;          /* 64 * count zeroed bytes, or 0                            */
  uint64_t barrier_budget; /* cycles a hart may wait at one barrier                    */
  uint64_t reserved[3];
} EtFusedArgs;
ET_STATIC_ASSERT(sizeof(EtFusedArgs) == 128, "EtFusedArgs size");

/* Test only. TEST_MATH: dst[i, r] = fn(src[i, r]) (src, src2, dst F32 [n, rows], n % 16 == 0)
 * with the et_math.h helper `fn` (EtTestMathFn), scalar (packed = 0) or 8-lane (packed = 1);
 * fn = ET_MATH_FN_COUNT runs every case in one launch: row r < 9 scalar function r, rows 9, 10,
 * 11 packed exp, reciprocal, silu. */
enum EtTestMathFn {
  ET_MATH_RECIP = 0,
  ET_MATH_RSQRT = 1,
  ET_MATH_EXP = 2,
  ET_MATH_SIGMOID = 3,
  ET_MATH_SILU = 4,
  ET_MATH_TANH = 5,
  ET_MATH_SIN = 6,
  ET_MATH_COS = 7,
  ET_MATH_DIV = 8, /* dst[i] = src[i] / src2[i] */
  ET_MATH_FN_COUNT = 9
};
typedef struct EtTestMathArgs {
  EtArgsHeader h;
  EtTensor src, src2, dst;
  uint32_t fn;
  uint32_t packed;
  uint32_t reserved[14];
} EtTestMathArgs;
ET_STATIC_ASSERT(sizeof(EtTestMathArgs) == 320, "EtTestMathArgs size");

/* TEST_FAULT: the hart of rank `rank` fails: mode 0 returns status/detail, mode 1 executes an
 * unimplemented instruction (fdiv.s, trap cause 30), mode 2 loads from an M-mode-only address,
 * mode 3 never returns (spins: inside a fused launch it never arrives at the next barrier). */
typedef struct EtTestFaultArgs {
  EtArgsHeader h;
  uint32_t rank;
  uint32_t mode;
  uint32_t status;
  uint32_t detail;
  uint32_t reserved[12];
} EtTestFaultArgs;
ET_STATIC_ASSERT(sizeof(EtTestFaultArgs) == 128, "EtTestFaultArgs size");

/* TEST_TENSOR: hart 0 runs one TensorFMA tile on its minion's tensor unit (the launch needs the
 * L1 scratchpad): A = arows lines at `a` (64 bytes each) into SCP lines 0.., B = the k-group
 * lines at `b` into SCP lines 16.., one FMA (type 0: int8, k = kvals bytes; 1: fp16, k = kvals
 * halves) with the A operand at line offset aoff (4-byte units for int8, 2-byte for fp16), the
 * 16 x 16 result tile (int32 or fp32) stored at `out` (1 KiB). */
typedef struct EtTestTensorArgs {
  EtArgsHeader h;
  uint64_t a, b, out;
  uint32_t type, arows, kvals, aoff;
  uint32_t reserved[6];
} EtTestTensorArgs;
ET_STATIC_ASSERT(sizeof(EtTestTensorArgs) == 128, "EtTestTensorArgs size");

/* ---- hart topology helpers (device and host) ----------------------------------------------- */
static inline uint32_t et_popcount64(uint64_t x) {
  uint32_t n = 0;
  while (x) {
    x &= x - 1;
    n++;
  }
  return n;
}

/* Number of enabled harts of a launch. */
static inline uint32_t et_hart_count(uint64_t shire_mask, uint32_t minion_mask, uint32_t threads) {
  return et_popcount64(shire_mask) * et_popcount64(minion_mask) * threads;
}

/* Rank of hart `hart` among the enabled harts: shire-major, then minion, then thread. */
static inline uint32_t et_hart_rank(uint64_t hart, uint64_t shire_mask, uint32_t minion_mask, uint32_t threads) {
  uint32_t shire = (uint32_t)(hart >> 6), minion = (uint32_t)((hart >> 1) & 31), thread = (uint32_t)(hart & 1);
  uint32_t nmin = et_popcount64(minion_mask);
  uint32_t below_s = et_popcount64(shire_mask & ((1ull << shire) - 1));
  uint32_t below_m = et_popcount64(minion_mask & ((1ull << minion) - 1));
  return (below_s * nmin + below_m) * threads + (threads == 2 ? thread : 0);
}

#ifdef __cplusplus
}
#endif

#endif /* !__ASSEMBLER__ */

#endif /* OPAL_ET_KERNEL_ABI_H */
