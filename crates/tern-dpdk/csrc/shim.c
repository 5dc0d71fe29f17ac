/* Tern's window onto DPDK's rte_lpm and rte_hash for `tern bench flow --against-dpdk`.
 * rte_lpm_lookup_bulk and the EAL set-up are macros or inline functions in DPDK's headers,
 * so Rust reaches them through these small wrappers. Built only with the `dpdk` feature. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_lpm.h>
#include <rte_memory.h>

/* The EAL without hugepages, PCI or shared files: enough for the lookup libraries. */
int tern_dpdk_init(unsigned mem_mb) {
    char mem[16];
    snprintf(mem, sizeof mem, "%u", mem_mb);
    char *argv[] = {"tern", "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry", "-l", "0",
                    "-m", mem, "--log-level", "error", NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    int r = rte_eal_init(argc, argv);
    return r < 0 ? -rte_errno : 0;
}

const char *tern_dpdk_strerror(int err) { return rte_strerror(err < 0 ? -err : err); }

struct rte_lpm *tern_lpm_create(const char *name, uint32_t max_rules, uint32_t tbl8s) {
    struct rte_lpm_config c = {.max_rules = max_rules, .number_tbl8s = tbl8s, .flags = 0};
    return rte_lpm_create(name, SOCKET_ID_ANY, &c);
}

int tern_lpm_add(struct rte_lpm *lpm, uint32_t ip, uint8_t depth, uint32_t next_hop) {
    return rte_lpm_add(lpm, ip, depth, next_hop);
}

/* next_hops[i]: the next hop with RTE_LPM_LOOKUP_SUCCESS set on a hit. */
void tern_lpm_lookup_bulk(const struct rte_lpm *lpm, const uint32_t *ips, uint32_t *next_hops, unsigned n) {
    rte_lpm_lookup_bulk(lpm, ips, next_hops, n);
}

void tern_lpm_free(struct rte_lpm *lpm) { rte_lpm_free(lpm); }

/* The IPv4 5-tuple as DPDK's l3fwd keys its exact-match table (16 bytes with padding). */
struct tern_ipv4_5tuple {
    uint32_t ip_dst;
    uint32_t ip_src;
    uint16_t port_dst;
    uint16_t port_src;
    uint8_t proto;
    uint8_t pad[3];
};

struct rte_hash *tern_hash_create(const char *name, uint32_t entries) {
    struct rte_hash_parameters p;
    memset(&p, 0, sizeof p);
    p.name = name;
    p.entries = entries;
    p.key_len = sizeof(struct tern_ipv4_5tuple);
    p.hash_func = rte_hash_crc;
    p.hash_func_init_val = 0;
    p.socket_id = SOCKET_ID_ANY;
    return rte_hash_create(&p);
}

int tern_hash_add(struct rte_hash *h, const struct tern_ipv4_5tuple *key, uint32_t value) {
    return rte_hash_add_key_data(h, key, (void *)(uintptr_t)value);
}

/* Looks up n (<= 64) keys; values[i] is the stored value on a hit; returns the hit mask. */
uint64_t tern_hash_lookup_bulk(const struct rte_hash *h, const struct tern_ipv4_5tuple **keys,
                               unsigned n, uint32_t *values) {
    void *data[RTE_HASH_LOOKUP_BULK_MAX];
    uint64_t hits = 0;
    rte_hash_lookup_bulk_data(h, (const void **)keys, n, &hits, data);
    for (unsigned i = 0; i < n; i++) values[i] = (uint32_t)(uintptr_t)data[i];
    return hits;
}

void tern_hash_free(struct rte_hash *h) { rte_hash_free(h); }
