/* The step metadata's host arithmetic in one pass over the requests (issue 41).

   attnplan/adapter/host_metadata.py ``from_host`` works out, for a prefill or mixed step, every per-token
   and per-page array the planned kernels take and writes them into one pinned staging buffer; in numpy
   that is ~30 calls of ~1 us each plus their Python (35 us a step on the development machine, 3-5x that
   on the H100 machine's host: bench/logs/h100-2026-11-26r/call3/prof_meta.log). Here it is two calls:
   ap_measure (counts, the longest KV length, the first request whose KV is shorter than its query) and
   ap_fill (the buffer). The layout is host_metadata.py's, written byte for byte as its numpy path writes it
   (tests/test_host_step_native.py holds the two equal over random steps); a change to one is a change to
   both.

   Compiled on first use by host_native.py (cc -O2 -shared -fPIC), loaded with ctypes; without a compiler
   the numpy path runs. Plain C99 that g++ compiles as well. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped with any change of a signature or of the layout: host_native.py checks it at load. */
int64_t ap_abi(void) { return 2; }

static inline int64_t seq_at(const void *seq, int64_t seq_is64, int64_t r) {
    return seq_is64 ? ((const int64_t *)seq)[r] : (int64_t)((const int32_t *)seq)[r];
}

/* info[0] new tokens, info[1] KV pages, info[2] longest KV length. Returns -1, or the first request
   whose KV length is shorter than its query length (host_metadata.py raises on it). */
int64_t ap_measure(const int64_t *q, const void *seq, int64_t seq_is64, int64_t b, int64_t page, int64_t *info) {
    int64_t t = 0, p = 0, mx = 0, bad = -1;
    for (int64_t r = 0; r < b; r++) {
        int64_t s = seq_at(seq, seq_is64, r);
        if (s < q[r] && bad < 0)
            bad = r;
        t += q[r];
        p += (s + page - 1) / page;
        if (s > mx)
            mx = s;
    }
    info[0] = t;
    info[1] = p;
    info[2] = mx;
    return bad;
}

/* Writes host_metadata.py's layout into h (int32; 8-byte aligned):
     bt == NULL: block-table entry of each new token [T], of each KV page [p_host] | each new token's
                 offset in its page [T]
     bt != NULL: each new token's slot, int64 [T] (2T int32) | each KV page's index [p_host]
   then per phase present (decode = requests [0, nd), prefill = [nd, b)): qo indptr from 0 [n + 1];
   per phase: KV page indptr from 0 [n + 1]; seq lens [b]; last page lens [b]; kv_device: each request's
   first entry minus its page offset [b] and its page count [b].
   info[3] the decode phase's tokens, info[4] its pages, info[5..6] its longest query and KV,
   info[7..8] the prefill phase's. */
void ap_fill(const int64_t *q, const void *seq, int64_t seq_is64, int64_t b, int64_t nd, int64_t page,
             int64_t width, int64_t t_all, int64_t p_host, int64_t kv_device, const int32_t *bt, int32_t *h,
             int64_t *info) {
    int32_t *entry = h, *kv = h + t_all, *off = h + t_all + p_host;
    int64_t *slots = (int64_t *)h;
    int32_t *pidx = h + 2 * t_all;
    int64_t tok = 0, pg = 0;
    int64_t t_dec = 0, p_dec = 0, mq[2] = {0, 0}, mk[2] = {0, 0};
    for (int64_t r = 0; r < b; r++) {
        int64_t s = seq_at(seq, seq_is64, r), n = q[r], row = r * width;
        int64_t pages = (s + page - 1) / page;
        int ph = r >= nd;
        if (r == nd) {
            t_dec = tok;
            p_dec = pg;
        }
        if (n > mq[ph])
            mq[ph] = n;
        if (s > mk[ph])
            mk[ph] = s;
        /* new token j of request r sits at KV position s - n + j: entry row + pos / page, offset pos % page;
           walked a page at a time (no division per token) */
        int64_t pos = s - n, e = row + pos / page, o = pos % page;
        for (int64_t j = 0; j < n;) {
            int64_t run = page - o < n - j ? page - o : n - j;
            if (bt == NULL) {
                for (int64_t k = 0; k < run; k++) {
                    entry[tok + k] = (int32_t)e;
                    off[tok + k] = (int32_t)(o + k);
                }
            } else {
                int64_t base = (int64_t)bt[e] * page + o;
                for (int64_t k = 0; k < run; k++)
                    slots[tok + k] = base + k;
            }
            tok += run;
            j += run;
            e += 1;
            o = 0;
        }
        if (p_host) {                     /* page k of request r: entry row + k */
            if (bt == NULL)
                for (int64_t k = 0; k < pages; k++)
                    kv[pg + k] = (int32_t)(row + k);
            else
                for (int64_t k = 0; k < pages; k++)
                    pidx[pg + k] = bt[row + k];
        }
        pg += pages;
    }
    if (nd == b) {
        t_dec = tok;
        p_dec = pg;
    }
    int32_t *w = h + 2 * t_all + p_host;
    int64_t lo[2] = {0, nd}, hi[2] = {nd, b};
    for (int part = 0; part < 2; part++) {          /* qo indptrs, then KV page indptrs, per phase */
        for (int ph = 0; ph < 2; ph++) {
            if (hi[ph] <= lo[ph])
                continue;
            int64_t acc = 0;
            *w++ = 0;
            for (int64_t r = lo[ph]; r < hi[ph]; r++) {
                acc += part == 0 ? q[r] : (seq_at(seq, seq_is64, r) + page - 1) / page;
                *w++ = (int32_t)acc;
            }
        }
    }
    for (int64_t r = 0; r < b; r++)
        w[r] = (int32_t)seq_at(seq, seq_is64, r);
    for (int64_t r = 0; r < b; r++)
        w[b + r] = (int32_t)((seq_at(seq, seq_is64, r) - 1) % page + 1);
    if (kv_device) {
        int64_t acc = 0;
        for (int64_t r = 0; r < b; r++) {
            int64_t pages = (seq_at(seq, seq_is64, r) + page - 1) / page;
            w[2 * b + r] = (int32_t)(r * width - acc);
            w[3 * b + r] = (int32_t)pages;
            acc += pages;
        }
    }
    info[3] = t_dec;
    info[4] = p_dec;
    info[5] = mq[0];
    info[6] = mk[0];
    info[7] = mq[1];
    info[8] = mk[1];
}

#ifdef __cplusplus
}
#endif
