/* boot.c - C part of the boot image (M-mode): launch checks, environment, hart records, the
 * end of a kernel (L1 write-back, PASS/FAIL to the emulator). See boot.S and et_kernel_abi.h. */
#include "backends/et/abi/et_kernel_abi.h"

#define CSR_MENABLE_SHADOWS 0x7d2
#define PMU_EVENT_CYCLES 1

/* Emulator cycles since the counter's base. mhpmcounter3 counts the cycle event, but sys_emu
 * keeps one counter per neighbourhood (8 minions) and thread, and reads it as k * (emulator
 * cycle - base), k = the harts of that neighbourhood and thread whose mhpmevent3 selects the
 * cycle event (insns/zicsr.cpp, counter_matches_event): every hart of a launch sets it here, so
 * k is 8 on a full shire and one raw read overstates the cycles k times. Two reads one
 * instruction, i.e. one emulator cycle, apart differ by k: divide by it. (The card's firmware
 * has its own counters; this boot stub is the emulator's.) */
static inline uint64_t read_cycles(void) {
  uint64_t a, b;
  __asm__ volatile("csrr %0, 0xb03\n\tcsrr %1, 0xb03" : "=&r"(a), "=r"(b));
  return b > a ? a / (b - a) : 0;
}

static volatile EtHartRecord* record_of(uint64_t hart) {
  return (volatile EtHartRecord*)(uintptr_t)(ET_HART_RECORD_ADDR + hart * sizeof(EtHartRecord));
}

/* Write back and invalidate the whole L1 data cache of this minion (EvictSW over 16 sets x 4
 * ways to memory), then wait for the cache operations. */
static void evict_l1(void) {
  __asm__ volatile("fence" ::: "memory");
  for (uint64_t way = 0; way < 4; ++way) {
    uint64_t v = (3ull << 58) | (0ull << 14) | (way << 6) | 15ull;
    __asm__ volatile("csrw 0x7f9, %0" : : "r"(v) : "memory");
  }
  __asm__ volatile("csrwi 0x830, 6" ::: "memory");
}

/* sys_emu prints characters written to validation1 (top byte 1), one line per hart. */
static void put_char(char c) {
  uint64_t v = (1ull << 56) | (uint8_t)c;
  __asm__ volatile("csrw 0x8d1, %0" : : "r"(v));
}
static void put_str(const char* s) {
  while (*s) put_char(*s++);
}
static void put_hex(uint64_t x) {
  put_str("0x");
  int started = 0;
  for (int sh = 60; sh >= 0; sh -= 4) {
    unsigned d = (unsigned)((x >> sh) & 15);
    if (d || started || sh == 0) {
      put_char((char)(d < 10 ? '0' + d : 'a' + d - 10));
      started = 1;
    }
  }
}

static void __attribute__((noreturn)) signal_end(int ok) {
  uint64_t v = ok ? ET_SIGNAL_PASS : ET_SIGNAL_FAIL;
  __asm__ volatile("csrw 0x8d0, %0" : : "r"(v) : "memory");
  for (;;) __asm__ volatile("wfi");
}

static void __attribute__((noreturn))
finish(uint64_t hart, uint32_t status, uint32_t detail, uint64_t mcause, uint64_t mepc, uint64_t mtval) {
  volatile EtHartRecord* r = record_of(hart);
  uint64_t start = r->cycles;
  r->detail = detail;
  r->mcause = mcause;
  r->mepc = mepc;
  r->mtval = mtval;
  r->cycles = read_cycles() - start;
  r->hart = hart;
  r->status = status;
  if (status != ET_STATUS_OK) { /* the emulator's log names the failing hart too */
    put_str("et-fail: hart ");
    put_hex(hart);
    put_str(" status ");
    put_hex(status);
    put_str(" detail ");
    put_hex(detail);
    put_str(" mcause ");
    put_hex(mcause);
    put_str(" mepc ");
    put_hex(mepc);
    put_str(" mtval ");
    put_hex(mtval);
    put_char('\n');
  }
  evict_l1();
  signal_end(status == ET_STATUS_OK);
}

void et_boot_prepare(uint64_t hart, uint64_t out[4]) {
  const volatile EtLaunch* l = (const volatile EtLaunch*)(uintptr_t)ET_LAUNCH_ADDR;
  volatile EtHartRecord* r = record_of(hart);
  r->launch_id = l->launch_id;
  r->status = ET_STATUS_NOT_RUN;
  r->hart = hart;
  if (l->magic != ET_LAUNCH_MAGIC || l->abi_version != ET_ABI_VERSION) finish(hart, ET_STATUS_BAD_LAUNCH, 0, 0, 0, 0);

  /* U-mode may read the hart id CSR (0xcd0) and hpmcounter3 (cycles). */
  __asm__ volatile("csrw 0x7d2, %0" : : "r"(1ull));
  __asm__ volatile("csrw mhpmevent3, %0" : : "r"((uint64_t)PMU_EVENT_CYCLES));
  __asm__ volatile("csrs mcounteren, %0" : : "r"(8ull));
  __asm__ volatile("csrs scounteren, %0" : : "r"(8ull));

  /* Each hart's EtEnv sits at the top of its own U stack (hart-private line: no sharing). */
  uint64_t ustack = ET_USTACK_TOP - hart * ET_USTACK_SIZE;
  volatile EtEnv* env = (volatile EtEnv*)(uintptr_t)(ustack - sizeof(EtEnv));
  env->version = ET_ABI_VERSION;
  env->freq_mhz = l->freq_mhz;
  env->shire_mask = l->shire_mask;
  env->minion_mask = l->minion_mask;
  env->threads = l->threads;
  env->launch_id = l->launch_id;
  for (int i = 0; i < 4; ++i) env->reserved[i] = 0;

  r->cycles = read_cycles();
  out[0] = l->entry_pc;
  out[1] = ustack - 2 * sizeof(EtEnv); /* 16-byte aligned, below the environment */
  out[2] = l->args;
  out[3] = (uint64_t)(uintptr_t)env;
}

void __attribute__((noreturn))
et_trap_finish(uint64_t a0, uint64_t mcause, uint64_t mepc, uint64_t mtval, uint64_t hart) {
  if (mcause == 8) /* ecall from U-mode: the kernel returned a0 */
    finish(hart, (uint32_t)a0, (uint32_t)(a0 >> 32), 0, 0, 0);
  finish(hart, ET_STATUS_TRAP, 0, mcause, mepc, mtval);
}
