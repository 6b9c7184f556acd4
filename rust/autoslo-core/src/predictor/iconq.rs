//! Iconq+ (§4): the LSTM over interaction feature vectors, and its hand-written f32 kernel.
//!
//! The network, exactly as `python/autoslo/predictor/model.py` defines it:
//!
//! ```text
//! z = (x − μ) / σ                        normalisation (training-set statistics)
//! e = ReLU(W_e z + b_e)                  embedding
//! (h_b, c_b) = LSTM_before(e_1 … e_k, e_self)          before-neighbours in arrival order, then q
//! (h_a, c_a) = LSTM_after(e'_1 … e'_m; from (h_b, c_b)) after-neighbours (Iconq+: arrival order)
//! ln L̂ = ln ℓ̂q + w_2 · ReLU(W_1 [h_b; h_a] + b_1) + b_2
//! ```
//!
//! Because the after-LSTM runs forward in time from cached state, a new arrival updates a running
//! query's prediction with one step (§4.4). The [`Kernel`] trait is that step interface; the native
//! kernel here and the libtorch kernel (`torch` feature) implement it over the same parameters.

use std::collections::HashMap;

use super::features::{INTERACTION_DIM, QUERY_DIM};
use crate::error::{AutoSloError, Result};

/// Recurrent state (hidden and cell vectors) of one LSTM sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct LstmState {
    pub h: Vec<f32>,
    pub c: Vec<f32>,
}

impl LstmState {
    pub fn zeros(hidden: usize) -> Self {
        Self { h: vec![0.0; hidden], c: vec![0.0; hidden] }
    }
}

/// The step interface of an Iconq+ implementation.
pub trait Kernel: Send + Sync {
    /// LSTM hidden size.
    fn hidden(&self) -> usize;
    /// Run the before-LSTM from zero state over `xs` (before-neighbours in order, then the query itself).
    fn before(&self, xs: &[[f32; INTERACTION_DIM]]) -> Result<LstmState>;
    /// One after-LSTM step: ingest the interaction vector of a later neighbour.
    fn after_step(&self, x: &[f32; INTERACTION_DIM], state: &mut LstmState) -> Result<()>;
    /// One after-LSTM step for each (x, state) pair: independent queries, batched where the kernel can.
    fn after_steps(&self, xs: &[[f32; INTERACTION_DIM]], states: &mut [LstmState]) -> Result<()> {
        if xs.len() != states.len() {
            return Err(AutoSloError::InvalidConfig(format!("{} inputs for {} states", xs.len(), states.len())));
        }
        xs.iter().zip(states.iter_mut()).try_for_each(|(x, st)| self.after_step(x, st))
    }
    /// A query's share of the first layer in the target and neighbour roles, for kernels that
    /// split it (then `*_with_parts` skip the query-feature part of every interaction vector).
    fn embed_parts(&self, _f: &[f32; QUERY_DIM]) -> Option<EmbedParts> {
        None
    }
    /// [`Kernel::before`] given each vector's (target, neighbour) [`EmbedParts`].
    fn before_with_parts(&self, xs: &[[f32; INTERACTION_DIM]], _parts: &[(&EmbedParts, &EmbedParts)]) -> Result<LstmState> {
        self.before(xs)
    }
    /// [`Kernel::after_steps`] given each vector's (target, neighbour) [`EmbedParts`].
    fn after_steps_with_parts(&self, xs: &[[f32; INTERACTION_DIM]], _parts: &[(&EmbedParts, &EmbedParts)], states: &mut [LstmState]) -> Result<()> {
        self.after_steps(xs, states)
    }
    /// Before passes of several independent sequences (e.g. one query on several clusters),
    /// batched where the kernel can; equal to one [`Kernel::before_with_parts`] / [`Kernel::before`]
    /// per sequence.
    fn before_many(&self, seqs: &[Seq<'_>]) -> Result<Vec<LstmState>> {
        seqs.iter()
            .map(|(xs, parts)| match parts {
                Some(p) => self.before_with_parts(xs, p),
                None => self.before(xs),
            })
            .collect()
    }
    /// ln of the predicted latency from the two hidden states and ln ℓ̂q.
    fn head(&self, h_before: &[f32], h_after: &[f32], ln_stage: f32) -> Result<f32>;
    /// What [`Kernel::head_with_prefix`] needs of `h_before`, computed once per query (a running
    /// query's before state never changes). By default `h_before` itself.
    fn head_prefix(&self, h_before: &[f32]) -> Result<Vec<f32>> {
        Ok(h_before.to_vec())
    }
    /// [`Kernel::head`] from a cached [`Kernel::head_prefix`]; equal to `head` to the bit.
    fn head_with_prefix(&self, prefix: &[f32], h_after: &[f32], ln_stage: f32) -> Result<f32> {
        self.head(prefix, h_after, ln_stage)
    }
    /// [`Kernel::head_with_prefix`] of several queries, each `(prefix, h_after, ln ℓ̂q)`, batched
    /// where the kernel can; equal to one call per query.
    fn heads_with_prefix(&self, items: &[HeadInput<'_>]) -> Result<Vec<f32>> {
        items.iter().map(|(p, h, l)| self.head_with_prefix(p, h, *l)).collect()
    }
    /// How many independent before passes one step of [`Kernel::before_many`] carries: a batch
    /// of fewer still costs a full step (1, the default: no lockstep).
    fn lockstep_width(&self) -> usize {
        1
    }
    /// A short name for reports ("native", "tch").
    fn name(&self) -> &'static str;
}

/// One query's head inputs: its cached head prefix, after-LSTM hidden state and ln ℓ̂q.
pub type HeadInput<'a> = (&'a [f32], &'a [f32], f32);

/// A query's pre-activation share of the embedding layer: its features (normalised) times the
/// layer's target-role and neighbour-role weight blocks. An interaction vector's embedding is
/// then bias + target part of the target + neighbour part of the neighbour + the pair features' part.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedParts {
    pub target: Vec<f32>,
    pub neighbour: Vec<f32>,
}

/// (target, neighbour) parts of each interaction vector of a sequence, if the kernel splits.
type Pairs<'a> = Option<&'a [(&'a EmbedParts, &'a EmbedParts)]>;
/// One before-sequence: its interaction vectors and, if the kernel splits, their parts.
pub type Seq<'a> = (&'a [[f32; INTERACTION_DIM]], Pairs<'a>);

/// Predict ln latency from whole neighbour sequences (the non-incremental path).
pub fn predict_sequence(k: &dyn Kernel, before_and_self: &[[f32; INTERACTION_DIM]], after: &[[f32; INTERACTION_DIM]], ln_stage: f32) -> Result<f32> {
    let hb = k.before(before_and_self)?;
    let mut st = hb.clone();
    for x in after {
        k.after_step(x, &mut st)?;
    }
    k.head(&hb.h, &st.h, ln_stage)
}

/// A named tensor: shape and row-major f32 data.
pub type NamedTensors = HashMap<String, (Vec<usize>, Vec<f32>)>;

#[derive(Debug, Clone)]
struct Lstm {
    /// [input + hidden] × 4·hidden, transposed from PyTorch's (4·hidden × input) and (4·hidden × hidden).
    w_t: Vec<f32>,
    /// b_ih + b_hh, gate order i, f, g, o (PyTorch's).
    b: Vec<f32>,
    /// `w_t` packed for the batched step: for each group of [`TILE`] output columns, all its
    /// [input + hidden] rows contiguously (a tile then streams through the cache sequentially
    /// instead of one line per 1 KB-strided row). Columns beyond the last whole tile are only in `w_t`.
    w_pack: Vec<f32>,
    /// `w_t` packed in [`TILE_WIDE`]-column groups, for the AVX-512 after-steps.
    w_pack_wide: Vec<f32>,
}

impl Lstm {
    fn new(w_t: Vec<f32>, b: Vec<f32>) -> Self {
        let w_pack = pack_tiles(&w_t, b.len(), TILE);
        let w_pack_wide = pack_tiles(&w_t, b.len(), TILE_WIDE);
        Self { w_t, b, w_pack, w_pack_wide }
    }
}

/// A transposed weight matrix (`k` rows of `n`) as `tile`-column groups, each group's `k` rows
/// contiguous; columns beyond the last whole group are left out (callers read them from `w_t`).
fn pack_tiles(w_t: &[f32], n: usize, tile: usize) -> Vec<f32> {
    let whole = n / tile * tile;
    let mut out = Vec::with_capacity(whole * (w_t.len() / n));
    for j in (0..whole).step_by(tile) {
        for row in w_t.chunks_exact(n) {
            out.extend_from_slice(&row[j..j + tile]);
        }
    }
    out
}

/// `out[b·n + j] = init[b][j] + Σ_kk w_t[kk, j] · v[kk·BATCH + b]` for a batch of `BATCH` input
/// vectors interleaved by row, so each weight row is read once for the whole batch and its inputs
/// sit side by side. `w_pack` is `w_t` through [`pack_tiles`]; `BATCH` × [`TILE`] accumulators stay
/// in registers per tile.
#[inline(always)]
fn gemm_batch<M: MulAdd>(w_t: &[f32], w_pack: &[f32], n: usize, v: &[f32], init: [&[f32]; BATCH], out: &mut [f32]) {
    const T: usize = TILE;
    let k = v.len() / BATCH;
    let mut j = 0;
    while j + T <= n {
        let mut a = [[0f32; T]; BATCH];
        for (acc, i) in a.iter_mut().zip(init) {
            acc.copy_from_slice(&i[j..j + T]);
        }
        let tile = &w_pack[j * k..(j + T) * k];
        for (wrow, vb) in tile.chunks_exact(T).zip(v.chunks_exact(BATCH)) {
            let row: &[f32; T] = wrow.try_into().expect("packed rows are one tile wide");
            for (acc, &x) in a.iter_mut().zip(vb) {
                for t in 0..T {
                    acc[t] = M::madd(row[t], x, acc[t]);
                }
            }
        }
        for (b, acc) in a.iter().enumerate() {
            out[b * n + j..b * n + j + T].copy_from_slice(acc);
        }
        j += T;
    }
    for jj in j..n {
        for (b, i) in init.iter().enumerate() {
            out[b * n + jj] = (0..k).fold(i[jj], |acc, kk| M::madd(w_t[kk * n + jj], v[kk * BATCH + b], acc));
        }
    }
}

/// `v[kk·BATCH + b] = x` for each of `xs`' `BATCH` rows (each `v.len() / BATCH` long): the layout [`gemm_batch`] reads.
#[inline(always)]
fn interleave(v: &mut [f32], xs: [&[f32]; BATCH]) {
    for (vb, kk) in v.chunks_exact_mut(BATCH).zip(0..) {
        for (o, x) in vb.iter_mut().zip(xs) {
            *o = x[kk];
        }
    }
}

/// Parameters of an Iconq+ network, read from a trained module, evaluated in plain Rust.
#[derive(Debug, Clone)]
pub struct NativeKernel {
    emb: usize,
    hidden: usize,
    head_hidden: usize,
    mu: Vec<f32>,
    inv_sigma: Vec<f32>,
    /// INTERACTION_DIM × emb (transposed).
    emb_w_t: Vec<f32>,
    emb_b: Vec<f32>,
    before: Lstm,
    after: Lstm,
    /// 2·hidden × head_hidden (transposed).
    head1_w_t: Vec<f32>,
    head1_b: Vec<f32>,
    /// The `h_after` rows of `head1_w_t` through [`pack_tiles`].
    head1_after_pack: Vec<f32>,
    head2_w: Vec<f32>,
    head2_b: f32,
    /// AVX2 and FMA were detected at run time.
    simd: Simd,
    /// AVX-512F was detected too: after-steps, and before passes in lockstep, run eight queries
    /// per weight read (see [`avx512`]).
    avx512: bool,
}

/// The instruction sets the kernel runs with, detected at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    /// Whatever the compile target guarantees (SSE2 on x86-64).
    Portable,
    /// AVX2 + FMA: 8 lanes, fused multiply-add. AVX-512 is used only where it measured faster
    /// on our machines: the eight-query GEMM of the after-steps and of before passes in
    /// lockstep (`NativeKernel::avx512`); 512-bit single steps and four-query batches were no
    /// faster than AVX2.
    Avx2Fma,
}

/// The environment variable that caps the instruction sets the kernel uses: `portable`, `avx2`
/// (AVX2 + FMA, no AVX-512) or `auto` (the default: the best the CPU has). For measuring what a
/// machine without AVX-512 gets, on one with it; a set the CPU lacks is never used.
pub const SIMD_ENV: &str = "AUTOSLO_SIMD";

/// The cap [`SIMD_ENV`] sets: `(AVX2 allowed, AVX-512 allowed)`.
fn simd_cap() -> Result<(bool, bool)> {
    match std::env::var(SIMD_ENV) {
        Err(std::env::VarError::NotPresent) => Ok((true, true)),
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok((true, true)),
            "avx2" => Ok((true, false)),
            "portable" => Ok((false, false)),
            other => Err(AutoSloError::InvalidConfig(format!("{SIMD_ENV}={other:?}: give `auto`, `avx2` or `portable`"))),
        },
        Err(e) => Err(AutoSloError::InvalidConfig(format!("{SIMD_ENV}: {e}"))),
    }
}

fn detect_simd() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") {
            return Simd::Avx2Fma;
        }
    }
    Simd::Portable
}

fn detect_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        detect_simd() == Simd::Avx2Fma && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn transpose(rows: usize, cols: usize, w: &[f32]) -> Vec<f32> {
    let mut t = vec![0f32; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// Multiply-add, plain (baseline x86-64 / other targets) or fused (inside the AVX2+FMA entry
/// points), with the widest tile that keeps enough independent accumulators in that instruction
/// set's registers to hide the FMA latency.
trait MulAdd: Sized {
    /// Widest output tile of [`axpy_rows`] (32 or 64).
    const WIDE: usize;
    fn madd(a: f32, b: f32, c: f32) -> f32;
    /// `v ← σ(v)` elementwise.
    #[inline(always)]
    fn sigmoid_all(v: &mut [f32]) {
        v.iter_mut().for_each(|x| *x = sigmoid::<Self>(*x));
    }
    /// `v ← tanh(v)` elementwise.
    #[inline(always)]
    fn tanh_all(v: &mut [f32]) {
        v.iter_mut().for_each(|x| *x = tanh::<Self>(*x));
    }
}
struct Plain;
impl MulAdd for Plain {
    const WIDE: usize = 32;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}
#[cfg(target_arch = "x86_64")]
struct Fused;
#[cfg(target_arch = "x86_64")]
impl MulAdd for Fused {
    const WIDE: usize = 64;
    #[inline(always)]
    fn madd(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn sigmoid_all(v: &mut [f32]) {
        // SAFETY: `Fused` is a private marker type instantiated only inside the `*_fma` entry
        // points, which run only after `detect_simd` found AVX2 and FMA on this CPU.
        unsafe { avx2::activate_all(v, avx2::Gate::Sigmoid) }
    }
    #[inline(always)]
    fn tanh_all(v: &mut [f32]) {
        // SAFETY: as in `sigmoid_all`.
        unsafe { avx2::activate_all(v, avx2::Gate::Tanh) }
    }
}

/// The AVX-512 batched GEMM of the after-steps and of before passes in lockstep.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{BATCH_WIDE as B, TILE_WIDE as T};

    /// `out[b·n + j] = bias[j] + Σ_kk w_t[kk, j] · v[kk·B + b]` for `B` inputs interleaved by row;
    /// `w_pack` is `w_t` in `T`-column groups. Per output the same fused multiply-adds in the same
    /// order as [`super::gemm_batch`], so both give the same bits.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn gemm8(w_t: &[f32], w_pack: &[f32], n: usize, v: &[f32], bias: &[f32], out: &mut [f32]) {
        let k = v.len() / B;
        let mut j = 0;
        while j + T <= n {
            let b0: &[f32; T] = bias[j..j + T].try_into().expect("a tile lies within the bias");
            // SAFETY: `b0` is T = 32 contiguous f32s; loadu needs no alignment.
            let init = unsafe { [_mm512_loadu_ps(b0.as_ptr()), _mm512_loadu_ps(b0.as_ptr().add(16))] };
            let mut a = [init; B];
            for (wrow, vb) in w_pack[j * k..(j + T) * k].chunks_exact(T).zip(v.chunks_exact(B)) {
                // SAFETY: `wrow` is exactly T = 32 contiguous f32s (`chunks_exact`).
                let (r0, r1) = unsafe { (_mm512_loadu_ps(wrow.as_ptr()), _mm512_loadu_ps(wrow.as_ptr().add(16))) };
                for (acc, &x) in a.iter_mut().zip(vb) {
                    let x = _mm512_set1_ps(x);
                    acc[0] = _mm512_fmadd_ps(r0, x, acc[0]);
                    acc[1] = _mm512_fmadd_ps(r1, x, acc[1]);
                }
            }
            for (b, acc) in a.iter().enumerate() {
                let o: &mut [f32; T] = (&mut out[b * n + j..b * n + j + T]).try_into().expect("a tile lies within its output row");
                // SAFETY: `o` is T = 32 contiguous, writable f32s; storeu needs no alignment.
                unsafe {
                    _mm512_storeu_ps(o.as_mut_ptr(), acc[0]);
                    _mm512_storeu_ps(o.as_mut_ptr().add(16), acc[1]);
                }
            }
            j += T;
        }
        for jj in j..n {
            for b in 0..B {
                out[b * n + jj] = (0..k).fold(bias[jj], |acc, kk| w_t[kk * n + jj].mul_add(v[kk * B + b], acc));
            }
        }
    }

    /// One input: `out[j] = bias[j] + Σ_kk w_t[kk, j] · v[kk]` with `v` = [`e`; `h`], per output
    /// exactly the fused multiply-adds of [`super::axpy_rows`] over `e`'s rows, then `h`'s, in
    /// that order (zero inputs skipped in the tiles, not in the scalar columns), so both give the
    /// same bits. Reads the packed tiles of `w_pack` (`T` columns, rows contiguous) four at a time:
    /// eight zmm accumulators hide the FMA latency, and four sequential streams replace the
    /// 1 KB-strided rows of `w_t`, whose lines conflict in L1.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) fn gemv(w_t: &[f32], w_pack: &[f32], n: usize, e: &[f32], h: &[f32], bias: &[f32], out: &mut [f32]) {
        let k = e.len() + h.len();
        let tiles = n / T;
        assert!(w_pack.len() >= tiles * T * k && w_t.len() >= k * n && bias.len() >= n && out.len() >= n, "weights, bias and output of a {k} × {n} layer");
        let mut t = 0;
        while t + 4 <= tiles {
            tiles_of::<4>(w_pack, k, t, e, h, bias, out);
            t += 4;
        }
        while t < tiles {
            tiles_of::<1>(w_pack, k, t, e, h, bias, out);
            t += 1;
        }
        for jj in tiles * T..n {
            out[jj] = e.iter().chain(h).enumerate().fold(bias[jj], |acc, (kk, &x)| w_t[kk * n + jj].mul_add(x, acc));
        }
    }

    /// Output tiles `t..t + G` of [`gemv`] (the caller checked the lengths).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn tiles_of<const G: usize>(w_pack: &[f32], k: usize, t: usize, e: &[f32], h: &[f32], bias: &[f32], out: &mut [f32]) {
        // SAFETY (every load and store below): `gemv` asserted w_pack.len() ≥ tiles·T·k, bias and
        // out ≥ n ≥ tiles·T, and t + G ≤ tiles; so tile t + i's row kk (kk < k), at
        // ((t + i)·k + kk)·T, and its T outputs at (t + i)·T lie within them. loadu/storeu need
        // no alignment.
        let mut a: [[__m512; 2]; G] = std::array::from_fn(|i| unsafe {
            let b = bias.as_ptr().add((t + i) * T);
            [_mm512_loadu_ps(b), _mm512_loadu_ps(b.add(16))]
        });
        for (kk, &x) in e.iter().chain(h).enumerate() {
            if x != 0.0 {
                let xv = _mm512_set1_ps(x);
                for (i, acc) in a.iter_mut().enumerate() {
                    unsafe {
                        let row = w_pack.as_ptr().add(((t + i) * k + kk) * T);
                        acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(row), xv, acc[0]);
                        acc[1] = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(16)), xv, acc[1]);
                    }
                }
            }
        }
        for (i, acc) in a.iter().enumerate() {
            unsafe {
                let o = out.as_mut_ptr().add((t + i) * T);
                _mm512_storeu_ps(o, acc[0]);
                _mm512_storeu_ps(o.add(16), acc[1]);
            }
        }
    }
}

/// Gate activations eight lanes at a time. The same e^x as [`exp_f32`], operation for operation;
/// the reciprocal in σ and tanh is `rcp` refined by one Newton step (relative error ≈ 2e-7)
/// instead of a division, whose throughput made the activations a quarter of an LSTM step.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(super) enum Gate {
        Sigmoid,
        Tanh,
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp(x: __m256) -> __m256 {
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0)), _mm256_set1_ps(88.0));
        let round = _mm256_set1_ps(12_582_912.0);
        let n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)), round), round);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428_606_8e-6), _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_145_75), x));
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let pow2n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127))));
        _mm256_mul_ps(p, pow2n)
    }

    /// 1 / d for d ≥ 1: `rcp` (12 bits) and one Newton step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn recip(d: __m256) -> __m256 {
        let r = _mm256_rcp_ps(d);
        _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn gate(x: __m256, g: Gate) -> __m256 {
        let one = _mm256_set1_ps(1.0);
        match g {
            // σ(x) = 1 / (1 + e^−x)
            Gate::Sigmoid => recip(_mm256_add_ps(one, exp(_mm256_sub_ps(_mm256_setzero_ps(), x)))),
            // tanh(x) = 1 − 2 / (e^2x + 1)
            Gate::Tanh => _mm256_fnmadd_ps(_mm256_set1_ps(2.0), recip(_mm256_add_ps(exp(_mm256_add_ps(x, x)), one)), one),
        }
    }

    /// Apply `g` to every element of `v`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn activate_all(v: &mut [f32], g: Gate) {
        let mut chunks = v.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` is exactly 8 contiguous f32s; loadu/storeu need no alignment.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), gate(_mm256_loadu_ps(c.as_ptr()), g)) };
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let mut buf = [0f32; 8];
            buf[..rest.len()].copy_from_slice(rest);
            // SAFETY: `buf` is 8 contiguous f32s.
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), gate(_mm256_loadu_ps(buf.as_ptr()), g)) };
            let n = rest.len();
            rest.copy_from_slice(&buf[..n]);
        }
    }
}

/// `acc += Σ_k v[k] · w_t[k, :]`, skipping zero inputs (post-ReLU embeddings are sparse).
///
/// Tiled so a tile's accumulators stay in registers while all inputs stream by (otherwise every
/// input would reload and store the whole accumulator): `M::WIDE` outputs (8 independent vector
/// accumulators, enough to hide the FMA latency) while they last, then narrower, then scalar.
#[inline(always)]
fn axpy_rows<M: MulAdd>(acc: &mut [f32], w_t: &[f32], v: &[f32]) {
    let n = acc.len();
    let mut j = 0;
    if M::WIDE >= 64 {
        while j + 64 <= n {
            axpy_tile::<M, 64>(acc, w_t, v, j);
            j += 64;
        }
    }
    while j + 32 <= n {
        axpy_tile::<M, 32>(acc, w_t, v, j);
        j += 32;
    }
    for (jj, x) in acc.iter_mut().enumerate().skip(j) {
        for (k, &vk) in v.iter().enumerate() {
            *x = M::madd(w_t[k * n + jj], vk, *x);
        }
    }
}

/// One tile of [`axpy_rows`]: outputs `j..j + T`.
#[inline(always)]
fn axpy_tile<M: MulAdd, const T: usize>(acc: &mut [f32], w_t: &[f32], v: &[f32], j: usize) {
    let n = acc.len();
    let mut a = [0f32; T];
    a.copy_from_slice(&acc[j..j + T]);
    for (wrow, &vk) in w_t.chunks_exact(n).zip(v) {
        if vk != 0.0 {
            let row: &[f32; T] = wrow[j..j + T].try_into().expect("a tile lies within its row");
            for t in 0..T {
                a[t] = M::madd(row[t], vk, a[t]);
            }
        }
    }
    acc[j..j + T].copy_from_slice(&a);
}

/// e^x for f32 without a libm call, so loops over it vectorise: x = n·ln2 + r, |r| ≤ ln2/2,
/// degree-6 Taylor polynomial for e^r (relative error ≤ 2e-7), 2^n from the exponent bits.
#[inline(always)]
fn exp_f32<M: MulAdd>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding and subtracting it rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = M::madd(-n, LN2_LO, M::madd(-n, LN2_HI, x));
    let mut p = 1.0 / 720.0;
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = M::madd(p, r, c);
    }
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[inline(always)]
fn sigmoid<M: MulAdd>(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32::<M>(-x))
}

#[inline(always)]
fn tanh<M: MulAdd>(x: f32) -> f32 {
    1.0 - 2.0 / (exp_f32::<M>(2.0 * x) + 1.0)
}

impl NativeKernel {
    /// Build the kernel from the module's named parameters (PyTorch names, see the module docs).
    pub fn from_named(p: &NamedTensors, origin: &str) -> Result<Self> {
        let get = |name: &str, shape: &[Option<usize>]| -> Result<(Vec<usize>, &[f32])> {
            let (s, d) = p.get(name).ok_or_else(|| AutoSloError::model(origin, format!("parameter `{name}` missing")))?;
            let ok = s.len() == shape.len() && s.iter().zip(shape).all(|(a, b)| b.is_none_or(|b| *a == b)) && d.len() == s.iter().product::<usize>();
            if !ok {
                return Err(AutoSloError::model(origin, format!("parameter `{name}` has shape {s:?}, expected {shape:?}")));
            }
            if d.iter().any(|v| !v.is_finite()) {
                return Err(AutoSloError::model(origin, format!("parameter `{name}` holds non-finite values")));
            }
            Ok((s.clone(), d.as_slice()))
        };
        let (allow_avx2, allow_avx512) = simd_cap()?;
        let d = INTERACTION_DIM;
        let (_, mu) = get("mu", &[Some(d)])?;
        let (_, sigma) = get("sigma", &[Some(d)])?;
        if sigma.iter().any(|&s| s <= 0.0) {
            return Err(AutoSloError::model(origin, "normalisation σ must be positive"));
        }
        let (es, emb_w) = get("emb.weight", &[None, Some(d)])?;
        let emb = es[0];
        let (_, emb_b) = get("emb.bias", &[Some(emb)])?;
        let (hs, _) = get("lstm_before.weight_hh_l0", &[None, None])?;
        let hidden = hs[1];
        let lstm = |pre: &str| -> Result<Lstm> {
            let (_, wih) = get(&format!("{pre}.weight_ih_l0"), &[Some(4 * hidden), Some(emb)])?;
            let (_, whh) = get(&format!("{pre}.weight_hh_l0"), &[Some(4 * hidden), Some(hidden)])?;
            let (_, bih) = get(&format!("{pre}.bias_ih_l0"), &[Some(4 * hidden)])?;
            let (_, bhh) = get(&format!("{pre}.bias_hh_l0"), &[Some(4 * hidden)])?;
            let mut w_t = transpose(4 * hidden, emb, wih);
            w_t.extend(transpose(4 * hidden, hidden, whh));
            Ok(Lstm::new(w_t, bih.iter().zip(bhh).map(|(a, b)| a + b).collect()))
        };
        let (before, after) = (lstm("lstm_before")?, lstm("lstm_after")?);
        let (h1s, h1w) = get("head1.weight", &[None, Some(2 * hidden)])?;
        let head_hidden = h1s[0];
        let (_, h1b) = get("head1.bias", &[Some(head_hidden)])?;
        let (_, h2w) = get("head2.weight", &[Some(1), Some(head_hidden)])?;
        let (_, h2b) = get("head2.bias", &[Some(1)])?;
        Ok(Self {
            emb,
            hidden,
            head_hidden,
            mu: mu.to_vec(),
            inv_sigma: sigma.iter().map(|s| 1.0 / s).collect(),
            emb_w_t: transpose(emb, d, emb_w),
            emb_b: emb_b.to_vec(),
            before,
            after,
            head1_after_pack: pack_tiles(&transpose(head_hidden, 2 * hidden, h1w)[hidden * head_hidden..], head_hidden, TILE),
            head1_w_t: transpose(head_hidden, 2 * hidden, h1w),
            head1_b: h1b.to_vec(),
            head2_w: h2w.to_vec(),
            head2_b: h2b[0],
            simd: if allow_avx2 { detect_simd() } else { Simd::Portable },
            avx512: allow_avx2 && allow_avx512 && detect_avx512(),
        })
    }

    /// The same kernel without the AVX2+FMA path (for comparisons).
    pub fn portable(&self) -> Self {
        Self { simd: Simd::Portable, avx512: false, ..self.clone() }
    }

    /// The same kernel without the AVX-512 after-steps (for comparisons).
    pub fn without_avx512(&self) -> Self {
        Self { avx512: false, ..self.clone() }
    }

    /// (embedding size, hidden size, head hidden size).
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.emb, self.hidden, self.head_hidden)
    }

    /// Normalise and embed one interaction vector into `e` (length `emb`).
    #[inline(always)]
    fn embed<M: MulAdd>(&self, x: &[f32; INTERACTION_DIM], pair: Option<(&EmbedParts, &EmbedParts)>, z: &mut [f32; INTERACTION_DIM], e: &mut [f32]) {
        match pair {
            None => {
                for k in 0..INTERACTION_DIM {
                    z[k] = (x[k] - self.mu[k]) * self.inv_sigma[k];
                }
                e.copy_from_slice(&self.emb_b);
                axpy_rows::<M>(e, &self.emb_w_t, z);
            }
            Some((t, n)) => {
                for k in PAIR_FROM..INTERACTION_DIM {
                    z[k] = (x[k] - self.mu[k]) * self.inv_sigma[k];
                }
                for (((o, &b), &a), &c) in e.iter_mut().zip(&self.emb_b).zip(&t.target).zip(&n.neighbour) {
                    *o = b + a + c;
                }
                axpy_rows::<M>(e, &self.emb_w_t[PAIR_FROM * self.emb..], &z[PAIR_FROM..]);
            }
        }
        e.iter_mut().for_each(|v| *v = v.max(0.0));
    }

    #[inline(always)]
    fn embed_parts_impl<M: MulAdd>(&self, f: &[f32; QUERY_DIM]) -> EmbedParts {
        let mut parts = [vec![0f32; self.emb], vec![0f32; self.emb]];
        let mut z = [0f32; QUERY_DIM];
        for (role, out) in parts.iter_mut().enumerate() {
            let off = role * QUERY_DIM;
            for (k, zk) in z.iter_mut().enumerate() {
                *zk = (f[k] - self.mu[off + k]) * self.inv_sigma[off + k];
            }
            axpy_rows::<M>(out, &self.emb_w_t[off * self.emb..(off + QUERY_DIM) * self.emb], &z);
        }
        let [target, neighbour] = parts;
        EmbedParts { target, neighbour }
    }

    /// Embed `x` and take one step of `l` (gate order i, f, g, o).
    #[inline(always)]
    fn step<M: MulAdd>(&self, l: &Lstm, x: &[f32; INTERACTION_DIM], pair: Option<(&EmbedParts, &EmbedParts)>, st: &mut LstmState, s: &mut Scratch) {
        let h = self.hidden;
        self.embed::<M>(x, pair, &mut s.z, &mut s.e);
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only if `detect_avx512` found AVX-512F on this CPU.
            unsafe { avx512::gemv(&l.w_t, &l.w_pack_wide, 4 * h, &s.e, &st.h, &l.b, &mut s.gates) };
            return self.activate::<M>(&mut s.gates, st);
        }
        s.gates.copy_from_slice(&l.b);
        axpy_rows::<M>(&mut s.gates, &l.w_t[..self.emb * 4 * h], &s.e);
        axpy_rows::<M>(&mut s.gates, &l.w_t[self.emb * 4 * h..], &st.h);
        self.activate::<M>(&mut s.gates, st);
    }

    /// Gate activations over whole blocks (vectorisable), then the state update.
    #[inline(always)]
    fn activate<M: MulAdd>(&self, gates: &mut [f32], st: &mut LstmState) {
        let h = self.hidden;
        let (ifg, o) = gates.split_at_mut(3 * h);
        let (i_f, g) = ifg.split_at_mut(2 * h);
        M::sigmoid_all(i_f);
        M::sigmoid_all(o);
        M::tanh_all(g);
        // Iterators, not indices: no bounds checks, so both loops vectorise.
        let (i, f) = i_f.split_at(h);
        for (((c, &ig), &fg), &gg) in st.c.iter_mut().zip(i).zip(f).zip(g.iter()) {
            *c = M::madd(fg, *c, ig * gg);
        }
        st.h.copy_from_slice(&st.c);
        M::tanh_all(&mut st.h);
        for (hv, &og) in st.h.iter_mut().zip(o.iter()) {
            *hv *= og;
        }
    }

    /// One step of `l` for `BATCH` independent sequences, reading each weight row once for all of them.
    #[inline(always)]
    fn step_batch<M: MulAdd>(&self, l: &Lstm, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &mut [LstmState], s: &mut Scratch) {
        let n = 4 * self.hidden;
        self.batch_inputs::<M, BATCH>(xs, pairs, sts, s);
        gemm_batch::<M>(&l.w_t, &l.w_pack, n, &s.v, [l.b.as_slice(); BATCH], &mut s.gb);
        self.activate_batch::<M>(sts, &mut s.gb);
    }

    /// Embed `B` inputs and interleave each [e; h] by row into `s.v` (v[kk·B + b]), so one weight
    /// row meets the whole batch at once; size `s.gb` for the gates.
    #[inline(always)]
    fn batch_inputs<M: MulAdd, const B: usize>(&self, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &[LstmState], s: &mut Scratch) {
        let k = self.emb + self.hidden;
        s.v.resize(B * k, 0.0);
        s.gb.resize(B * 4 * self.hidden, 0.0);
        for (b, (x, st)) in xs.iter().zip(sts).take(B).enumerate() {
            self.embed::<M>(x, pairs.map(|p| p[b]), &mut s.z, &mut s.e);
            for (kk, &v) in s.e.iter().chain(&st.h).enumerate() {
                s.v[kk * B + b] = v;
            }
        }
    }

    /// Gate activations and state updates of a batch, from its pre-activations `gb` (one row of
    /// 4 × hidden per state).
    #[inline(always)]
    fn activate_batch<M: MulAdd>(&self, sts: &mut [LstmState], gb: &mut [f32]) {
        for (st, g) in sts.iter_mut().zip(gb.chunks_exact_mut(4 * self.hidden)) {
            self.activate::<M>(g, st);
        }
    }

    /// One after-step for each of `sts`: whole batches, then the rest one by one (a batch padded
    /// with zeros was measured slower than two or three single steps, which skip zero inputs).
    #[inline(always)]
    fn after_batch<M: MulAdd>(&self, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &mut [LstmState]) {
        let mut s = Scratch::new(self);
        let full = xs.len() / BATCH * BATCH;
        for (c, (xc, sc)) in xs[..full].chunks_exact(BATCH).zip(sts[..full].chunks_exact_mut(BATCH)).enumerate() {
            self.step_batch::<M>(&self.after, xc, pairs.map(|p| &p[c * BATCH..(c + 1) * BATCH]), sc, &mut s);
        }
        for (i, (x, st)) in xs.iter().zip(sts.iter_mut()).enumerate().skip(full) {
            self.step::<M>(&self.after, x, pairs.map(|p| p[i]), st, &mut s);
        }
    }

    /// After-steps with the widest instruction set the CPU has.
    fn after_batch_dispatch(&self, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &mut [LstmState]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only if `detect_avx512` found AVX-512F, AVX2 and FMA on this
            // CPU, which is exactly what the entry point is compiled for.
            return unsafe { self.after_batch_512(xs, pairs, sts) };
        }
        self.after_batch_narrow(xs, pairs, sts);
    }

    /// After-steps eight queries at a time with 512-bit registers (the weight reads from L2 bound
    /// the four-query AVX2 step; eight queries per read measured 1.5× its throughput), the rest
    /// through the AVX2 path.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn after_batch_512(&self, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &mut [LstmState]) {
        let full = xs.len() / BATCH_WIDE * BATCH_WIDE;
        if full == 0 {
            return self.after_batch::<Fused>(xs, pairs, sts);
        }
        let mut s = Scratch::new(self);
        for (c, (xc, sc)) in xs[..full].chunks_exact(BATCH_WIDE).zip(sts[..full].chunks_exact_mut(BATCH_WIDE)).enumerate() {
            self.step_wide(&self.after, xc, pairs.map(|p| &p[c * BATCH_WIDE..(c + 1) * BATCH_WIDE]), sc, &mut s);
        }
        self.after_batch::<Fused>(&xs[full..], pairs.map(|p| &p[full..]), &mut sts[full..]);
    }

    /// One step of `l` for up to [`BATCH_WIDE`] independent sequences in 512-bit registers (one
    /// weight read for all of them, [`avx512::gemm8`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn step_wide(&self, l: &Lstm, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &mut [LstmState], s: &mut Scratch) {
        self.batch_inputs::<Fused, BATCH_WIDE>(xs, pairs, sts, s);
        avx512::gemm8(&l.w_t, &l.w_pack_wide, 4 * self.hidden, &s.v, &l.b, &mut s.gb);
        self.activate_batch::<Fused>(sts, &mut s.gb);
    }

    /// Before passes of independent sequences in lockstep: while `BATCH` of them still have
    /// inputs, one batched step serves them all (each weight row read once for the batch).
    #[inline(always)]
    fn before_lockstep<M: MulAdd>(&self, seqs: &[Seq<'_>], out: &mut [LstmState]) {
        let mut s = Scratch::new(self);
        for (group, sts) in seqs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            // A partial group is cheaper one step at a time (see `after_batch`).
            let lockstep = group.len() == BATCH;
            self.lockstep_group::<M, BATCH, false>(group, sts, lockstep, &mut s);
        }
    }

    /// Before passes of `group` (at most `B` sequences) into `sts`: with `lockstep`, one batched
    /// step for the whole group while every sequence has inputs ([`NativeKernel::step_wide`] if
    /// `WIDE`, else `step_batch`; lanes past the group stay zero and are discarded: `batch_inputs`
    /// writes only the group's); then each sequence's remaining steps one by one.
    ///
    /// The step is chosen by a constant, not passed as a closure: a closure is a function of its
    /// own, compiled without its caller's target features, so the SIMD intrinsics inlined into it
    /// became out-of-line calls (9a6e48c: SimulateBatch 2–3× slower on AVX2).
    #[inline(always)]
    fn lockstep_group<M: MulAdd, const B: usize, const WIDE: bool>(&self, group: &[Seq<'_>], sts: &mut [LstmState], lockstep: bool, s: &mut Scratch) {
        let m = group.len();
        let common = if lockstep { group.iter().map(|q| q.0.len()).min().unwrap_or(0) } else { 0 };
        let all_parts = group.iter().all(|q| q.1.is_some());
        if WIDE {
            s.v.clear();
        }
        let mut xs = [[0f32; INTERACTION_DIM]; B];
        for t in 0..common {
            for (x, q) in xs.iter_mut().zip(group) {
                *x = q.0[t];
            }
            let pairs: Option<[(&EmbedParts, &EmbedParts); B]> = all_parts.then(|| std::array::from_fn(|b| group[b.min(m - 1)].1.expect("checked: all sequences have parts")[t]));
            let pairs = pairs.as_ref().map(|p| &p[..m]);
            #[cfg(target_arch = "x86_64")]
            if WIDE {
                // SAFETY: `WIDE` is set only by `before_lockstep_512`, which runs only where
                // AVX-512F, AVX2 and FMA are present (see `before_lockstep_widest`).
                unsafe { self.step_wide(&self.before, &xs[..m], pairs, sts, s) };
                continue;
            }
            self.step_batch::<M>(&self.before, &xs[..m], pairs, sts, s);
        }
        for (q, st) in group.iter().zip(sts.iter_mut()) {
            for t in common..q.0.len() {
                self.step::<M>(&self.before, &q.0[t], q.1.map(|p| p[t]), st, s);
            }
        }
    }

    /// Before passes in lockstep with 512-bit registers: groups of more than [`BATCH`] sequences
    /// take one eight-lane step ([`NativeKernel::step_wide`]) while they all have inputs, padded
    /// to eight lanes; smaller groups go through the AVX2 path. Lanes are independent, and the
    /// GEMM does each output's multiply-adds in the AVX2 order, so every state equals its
    /// one-at-a-time pass to the bit.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn before_lockstep_512(&self, seqs: &[Seq<'_>], out: &mut [LstmState]) {
        let mut s = Scratch::new(self);
        for (group, sts) in seqs.chunks(BATCH_WIDE).zip(out.chunks_mut(BATCH_WIDE)) {
            if group.len() <= BATCH {
                self.before_lockstep::<Fused>(group, sts);
            } else {
                self.lockstep_group::<Fused, BATCH_WIDE, true>(group, sts, true, &mut s);
            }
        }
    }

    /// Before passes in lockstep with the widest instruction set the CPU has.
    fn before_lockstep_widest(&self, seqs: &[Seq<'_>], out: &mut [LstmState]) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512 {
            // SAFETY: `avx512` is set only if `detect_avx512` found AVX-512F, AVX2 and FMA on this
            // CPU, which is exactly what the entry point is compiled for.
            return unsafe { self.before_lockstep_512(seqs, out) };
        }
        self.before_lockstep_dispatch(seqs, out);
    }

    #[inline(always)]
    fn run<M: MulAdd>(&self, l: &Lstm, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, st: &mut LstmState) {
        let mut s = Scratch::new(self);
        for (i, x) in xs.iter().enumerate() {
            self.step::<M>(l, x, pairs.map(|p| p[i]), st, &mut s);
        }
    }

    /// First head layer's bias plus its `h_before` part.
    #[inline(always)]
    fn head_prefix_impl<M: MulAdd>(&self, hb: &[f32]) -> Vec<f32> {
        let mut a = self.head1_b.clone();
        axpy_rows::<M>(&mut a, &self.head1_w_t[..self.hidden * self.head_hidden], hb);
        a
    }

    /// The head from its prefix: add the `h_after` part, ReLU, output layer.
    #[inline(always)]
    fn head_rest<M: MulAdd>(&self, mut a: Vec<f32>, ha: &[f32]) -> f32 {
        axpy_rows::<M>(&mut a, &self.head1_w_t[self.hidden * self.head_hidden..], ha);
        a.iter().zip(&self.head2_w).fold(self.head2_b, |acc, (v, w)| M::madd(v.max(0.0), *w, acc))
    }

    #[inline(always)]
    fn head_impl<M: MulAdd>(&self, hb: Option<&[f32]>, prefix: Option<&[f32]>, ha: &[f32]) -> f32 {
        let a = match (hb, prefix) {
            (_, Some(p)) => p.to_vec(),
            (Some(hb), None) => self.head_prefix_impl::<M>(hb),
            (None, None) => self.head1_b.clone(),
        };
        self.head_rest::<M>(a, ha)
    }

    /// Heads of `BATCH` queries at a time through [`gemm_batch`] (the rest one by one).
    #[inline(always)]
    fn heads_batch<M: MulAdd>(&self, items: &[HeadInput<'_>]) -> Vec<f32> {
        let (h, hh) = (self.hidden, self.head_hidden);
        let w_after = &self.head1_w_t[h * hh..];
        let (mut v, mut a) = (vec![0f32; BATCH * h], vec![0f32; BATCH * hh]);
        let mut out = Vec::with_capacity(items.len());
        let full = items.len() / BATCH * BATCH;
        for chunk in items[..full].chunks_exact(BATCH) {
            interleave(&mut v, std::array::from_fn(|b| chunk[b].1));
            gemm_batch::<M>(w_after, &self.head1_after_pack, hh, &v, std::array::from_fn(|b| chunk[b].0), &mut a);
            for (acc, (_, _, ln_stage)) in a.chunks_exact(hh).zip(chunk) {
                out.push(ln_stage + acc.iter().zip(&self.head2_w).fold(self.head2_b, |acc, (v, w)| M::madd(v.max(0.0), *w, acc)));
            }
        }
        for (p, ha, ln_stage) in &items[full..] {
            out.push(ln_stage + self.head_impl::<M>(None, Some(p), ha));
        }
        out
    }

    /// The instruction sets in use.
    pub fn simd(&self) -> Simd {
        self.simd
    }

    /// Whether the fused multiply-add (AVX2+FMA) path is in use.
    pub fn uses_fma(&self) -> bool {
        self.simd != Simd::Portable
    }
}

/// For each line `fn name / name_fma(args) -> R = imp;`: `name` runs `imp::<Fused>` through the
/// AVX2+FMA entry point `name_fma` when the CPU has them, else `imp::<Plain>`.
macro_rules! simd_dispatch {
    ($($(#[$doc:meta])* fn $name:ident / $fma:ident ($($a:ident: $t:ty),*) -> $r:ty = $imp:ident;)*) => {
        impl NativeKernel {
            $(
                $(#[$doc])*
                fn $name(&self, $($a: $t),*) -> $r {
                    #[cfg(target_arch = "x86_64")]
                    if self.simd == Simd::Avx2Fma {
                        // SAFETY: `self.simd` is `Avx2Fma` only if `detect_simd` found AVX2 and FMA on
                        // this CPU, which is exactly what the entry point is compiled for.
                        return unsafe { self.$fma($($a),*) };
                    }
                    self.$imp::<Plain>($($a),*)
                }

                #[cfg(target_arch = "x86_64")]
                #[target_feature(enable = "avx2,fma")]
                unsafe fn $fma(&self, $($a: $t),*) -> $r {
                    self.$imp::<Fused>($($a),*)
                }
            )*
        }
    };
}

simd_dispatch! {
    /// Run `l` over `xs` from `st`.
    fn run_dispatch / run_fma(l: &Lstm, xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, st: &mut LstmState) -> () = run;
    fn before_lockstep_dispatch / before_lockstep_fma(seqs: &[Seq<'_>], out: &mut [LstmState]) -> () = before_lockstep;
    fn embed_parts_dispatch / embed_parts_fma(f: &[f32; QUERY_DIM]) -> EmbedParts = embed_parts_impl;
    /// The head from `hb` or from a cached prefix of it (see [`Kernel::head_prefix`]).
    fn head_dispatch / head_fma(hb: Option<&[f32]>, prefix: Option<&[f32]>, ha: &[f32]) -> f32 = head_impl;
    fn head_prefix_dispatch / head_prefix_fma(hb: &[f32]) -> Vec<f32> = head_prefix_impl;
    fn heads_dispatch / heads_fma(items: &[HeadInput<'_>]) -> Vec<f32> = heads_batch;
    fn after_batch_narrow / after_batch_fma(xs: &[[f32; INTERACTION_DIM]], pairs: Pairs<'_>, sts: &mut [LstmState]) -> () = after_batch;
}

/// Queries per batched after-step.
const BATCH: usize = 4;
/// Output columns per register tile of the batched step (`BATCH` × `TILE` accumulators).
const TILE: usize = 16;
/// Queries per AVX-512 after-step batch, and its output columns per tile (8 × 2 zmm accumulators).
const BATCH_WIDE: usize = 8;
const TILE_WIDE: usize = 32;
/// First interaction feature that belongs to the pair (timing and size), not to either query.
const PAIR_FROM: usize = 2 * QUERY_DIM;

/// Per-call buffers of a step.
struct Scratch {
    z: [f32; INTERACTION_DIM],
    e: Vec<f32>,
    gates: Vec<f32>,
    /// Batched inputs [e; h] and gates.
    v: Vec<f32>,
    gb: Vec<f32>,
}

impl Scratch {
    fn new(k: &NativeKernel) -> Self {
        Self { z: [0.0; INTERACTION_DIM], e: vec![0.0; k.emb], gates: vec![0.0; 4 * k.hidden], v: Vec::new(), gb: Vec::new() }
    }
}

impl NativeKernel {
    fn check_states(&self, n: usize, states: &[LstmState]) -> Result<()> {
        if n != states.len() {
            return Err(AutoSloError::InvalidConfig(format!("{n} inputs for {} states", states.len())));
        }
        if let Some(st) = states.iter().find(|st| st.h.len() != self.hidden || st.c.len() != self.hidden) {
            return Err(AutoSloError::InvalidConfig(format!("LSTM state of size {} for a model of hidden size {}", st.h.len(), self.hidden)));
        }
        Ok(())
    }

    fn check_parts(&self, n: usize, parts: &[(&EmbedParts, &EmbedParts)]) -> Result<()> {
        if n != parts.len() {
            return Err(AutoSloError::InvalidConfig(format!("{n} inputs for {} embedding parts", parts.len())));
        }
        if parts.iter().any(|(t, m)| t.target.len() != self.emb || m.neighbour.len() != self.emb) {
            return Err(AutoSloError::InvalidConfig(format!("embedding parts not of this model's size {}", self.emb)));
        }
        Ok(())
    }
}

impl Kernel for NativeKernel {
    fn hidden(&self) -> usize {
        self.hidden
    }

    fn before(&self, xs: &[[f32; INTERACTION_DIM]]) -> Result<LstmState> {
        let mut st = LstmState::zeros(self.hidden);
        self.run_dispatch(&self.before, xs, None, &mut st);
        Ok(st)
    }

    fn embed_parts(&self, f: &[f32; QUERY_DIM]) -> Option<EmbedParts> {
        Some(self.embed_parts_dispatch(f))
    }

    fn before_with_parts(&self, xs: &[[f32; INTERACTION_DIM]], parts: &[(&EmbedParts, &EmbedParts)]) -> Result<LstmState> {
        self.check_parts(xs.len(), parts)?;
        let mut st = LstmState::zeros(self.hidden);
        self.run_dispatch(&self.before, xs, Some(parts), &mut st);
        Ok(st)
    }

    fn before_many(&self, seqs: &[Seq<'_>]) -> Result<Vec<LstmState>> {
        for (xs, parts) in seqs {
            if let Some(p) = parts {
                self.check_parts(xs.len(), p)?;
            }
        }
        let mut out = vec![LstmState::zeros(self.hidden); seqs.len()];
        self.before_lockstep_widest(seqs, &mut out);
        Ok(out)
    }

    fn after_steps_with_parts(&self, xs: &[[f32; INTERACTION_DIM]], parts: &[(&EmbedParts, &EmbedParts)], states: &mut [LstmState]) -> Result<()> {
        self.check_parts(xs.len(), parts)?;
        self.check_states(xs.len(), states)?;
        self.after_batch_dispatch(xs, Some(parts), states);
        Ok(())
    }

    fn after_step(&self, x: &[f32; INTERACTION_DIM], st: &mut LstmState) -> Result<()> {
        if st.h.len() != self.hidden || st.c.len() != self.hidden {
            return Err(AutoSloError::InvalidConfig(format!("LSTM state of size {} for a model of hidden size {}", st.h.len(), self.hidden)));
        }
        self.run_dispatch(&self.after, std::slice::from_ref(x), None, st);
        Ok(())
    }

    fn after_steps(&self, xs: &[[f32; INTERACTION_DIM]], states: &mut [LstmState]) -> Result<()> {
        self.check_states(xs.len(), states)?;
        self.after_batch_dispatch(xs, None, states);
        Ok(())
    }

    fn head(&self, hb: &[f32], ha: &[f32], ln_stage: f32) -> Result<f32> {
        if hb.len() != self.hidden || ha.len() != self.hidden {
            return Err(AutoSloError::InvalidConfig(format!("hidden states of size {}/{} for a model of hidden size {}", hb.len(), ha.len(), self.hidden)));
        }
        Ok(ln_stage + self.head_dispatch(Some(hb), None, ha))
    }

    fn head_prefix(&self, hb: &[f32]) -> Result<Vec<f32>> {
        if hb.len() != self.hidden {
            return Err(AutoSloError::InvalidConfig(format!("hidden state of size {} for a model of hidden size {}", hb.len(), self.hidden)));
        }
        Ok(self.head_prefix_dispatch(hb))
    }

    fn head_with_prefix(&self, prefix: &[f32], ha: &[f32], ln_stage: f32) -> Result<f32> {
        if prefix.len() != self.head_hidden || ha.len() != self.hidden {
            return Err(AutoSloError::InvalidConfig(format!("head prefix of size {} / hidden state of size {} for a model of sizes {}/{}", prefix.len(), ha.len(), self.head_hidden, self.hidden)));
        }
        Ok(ln_stage + self.head_dispatch(None, Some(prefix), ha))
    }

    fn heads_with_prefix(&self, items: &[HeadInput<'_>]) -> Result<Vec<f32>> {
        if let Some((p, ha, _)) = items.iter().find(|(p, ha, _)| p.len() != self.head_hidden || ha.len() != self.hidden) {
            return Err(AutoSloError::InvalidConfig(format!("head prefix of size {} / hidden state of size {} for a model of sizes {}/{}", p.len(), ha.len(), self.head_hidden, self.hidden)));
        }
        Ok(self.heads_dispatch(items))
    }

    /// Eight with AVX-512, else four.
    fn lockstep_width(&self) -> usize {
        if self.avx512 {
            BATCH_WIDE
        } else {
            BATCH
        }
    }

    fn name(&self) -> &'static str {
        "native"
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Random parameters in PyTorch's layout, for tests that need a kernel without a trained model.
    pub(crate) fn random_params(emb: usize, hidden: usize, head: usize, seed: u64) -> NamedTensors {
        let mut r = Rng::new(seed);
        let mut t = NamedTensors::new();
        let mut put = |name: &str, shape: Vec<usize>, scale: f64| {
            let n = shape.iter().product();
            let d = (0..n).map(|_| ((r.uniform() * 2.0 - 1.0) * scale) as f32).collect();
            t.insert(name.to_string(), (shape, d));
        };
        let d = INTERACTION_DIM;
        put("mu", vec![d], 1.0);
        put("emb.weight", vec![emb, d], 0.3);
        put("emb.bias", vec![emb], 0.1);
        for pre in ["lstm_before", "lstm_after"] {
            put(&format!("{pre}.weight_ih_l0"), vec![4 * hidden, emb], 0.3);
            put(&format!("{pre}.weight_hh_l0"), vec![4 * hidden, hidden], 0.3);
            put(&format!("{pre}.bias_ih_l0"), vec![4 * hidden], 0.1);
            put(&format!("{pre}.bias_hh_l0"), vec![4 * hidden], 0.1);
        }
        put("head1.weight", vec![head, 2 * hidden], 0.3);
        put("head1.bias", vec![head], 0.1);
        put("head2.weight", vec![1, head], 0.3);
        put("head2.bias", vec![1], 0.1);
        t.insert("sigma".into(), (vec![d], vec![1.5; d]));
        t
    }

    #[test]
    fn incremental_steps_equal_whole_sequence() {
        let k = NativeKernel::from_named(&random_params(8, 6, 5, 1), "test").unwrap();
        let mut r = Rng::new(2);
        let xs: Vec<[f32; INTERACTION_DIM]> = (0..7).map(|_| std::array::from_fn(|_| r.uniform() as f32)).collect();
        let whole = predict_sequence(&k, &xs[..3], &xs[3..], 0.5).unwrap();
        let hb = k.before(&xs[..3]).unwrap();
        let mut st = hb.clone();
        for x in &xs[3..] {
            k.after_step(x, &mut st).unwrap();
        }
        assert_eq!(whole, k.head(&hb.h, &st.h, 0.5).unwrap());
        // No after-neighbours: the after state is the before state.
        let alone = predict_sequence(&k, &xs[..3], &[], 0.5).unwrap();
        assert_eq!(alone, k.head(&hb.h, &hb.h, 0.5).unwrap());
        assert!(whole.is_finite() && whole != alone);
    }

    #[test]
    fn batched_after_steps_equal_single_steps() {
        let k = NativeKernel::from_named(&random_params(16, 12, 8, 6), "test").unwrap();
        for kern in [k.clone(), k.portable()] {
            let mut r = Rng::new(8);
            let xs: Vec<[f32; INTERACTION_DIM]> = (0..11).map(|_| std::array::from_fn(|_| (r.uniform() * 4.0 - 2.0) as f32)).collect();
            let base: Vec<LstmState> = (0..11).map(|i| kern.before(&xs[..=i]).unwrap()).collect();
            let mut batched = base.clone();
            kern.after_steps(&xs, &mut batched).unwrap();
            for (i, st) in base.iter().enumerate() {
                let mut one = st.clone();
                kern.after_step(&xs[i], &mut one).unwrap();
                for (a, b) in one.h.iter().zip(&batched[i].h).chain(one.c.iter().zip(&batched[i].c)) {
                    assert!((a - b).abs() < 1e-6, "{a} vs {b}");
                }
            }
            assert!(kern.after_steps(&xs[..3], &mut batched).is_err());
        }
    }

    #[test]
    #[cfg_attr(not(autoslo_host_avx512), ignore = "this CPU has no AVX-512: there is no second path to compare")]
    fn avx512_after_steps_equal_avx2_ones() {
        assert!(detect_avx512(), "the build saw AVX-512 on this CPU, the test does not");
        // Hidden 12: 48 gates, one 32-column zmm tile plus a scalar remainder.
        let k = NativeKernel::from_named(&random_params(16, 12, 8, 11), "test").unwrap();
        assert!(k.avx512);
        let narrow = k.without_avx512();
        let mut r = Rng::new(12);
        let xs: Vec<[f32; INTERACTION_DIM]> = (0..19).map(|_| std::array::from_fn(|_| (r.uniform() * 4.0 - 2.0) as f32)).collect();
        let base: Vec<LstmState> = (0..19).map(|i| k.before(&xs[..=i]).unwrap()).collect();
        let (mut a, mut b) = (base.clone(), base);
        k.after_steps(&xs, &mut a).unwrap();
        narrow.after_steps(&xs, &mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    #[cfg_attr(not(autoslo_host_avx512), ignore = "this CPU has no AVX-512: there is no second path to compare")]
    fn avx512_single_steps_equal_avx2_ones() {
        assert!(detect_avx512(), "the build saw AVX-512 on this CPU, the test does not");
        // Hidden 12: one 32-column tile and 16 scalar columns; hidden 40: a group of four tiles
        // and one more.
        for (hidden, seed) in [(12, 3), (40, 4)] {
            let k = NativeKernel::from_named(&random_params(16, hidden, 8, seed), "test").unwrap();
            assert!(k.avx512, "hidden {hidden}: the kernel does not take its AVX-512 path");
            let narrow = k.without_avx512();
            let mut r = Rng::new(seed);
            let xs: Vec<[f32; INTERACTION_DIM]> = (0..23).map(|_| std::array::from_fn(|_| (r.uniform() * 4.0 - 2.0) as f32)).collect();
            let (a, b) = (k.before(&xs).unwrap(), narrow.before(&xs).unwrap());
            assert_eq!(a, b, "hidden {hidden}");
            let (mut a, mut b) = (a.clone(), b);
            k.after_step(&xs[0], &mut a).unwrap();
            narrow.after_step(&xs[0], &mut b).unwrap();
            assert_eq!(a, b, "hidden {hidden}");
        }
    }

    #[test]
    fn wide_lockstep_before_passes_equal_one_at_a_time() {
        let k = NativeKernel::from_named(&random_params(16, 12, 8, 11), "test").unwrap();
        let narrow = k.without_avx512();
        let mut r = Rng::new(5);
        // 19 ragged sequences: groups of eight (wide where the CPU has AVX-512), then three; and
        // 14: eight, then six in a padded wide group.
        let lens = [9usize, 7, 12, 7, 8, 10, 9, 11, 6, 13, 7, 9, 8, 10, 5, 9, 7, 12, 6];
        let xs: Vec<Vec<[f32; INTERACTION_DIM]>> = lens.iter().map(|&n| (0..n).map(|_| std::array::from_fn(|_| (r.uniform() * 4.0 - 2.0) as f32)).collect()).collect();
        let parts: Vec<Vec<EmbedParts>> = lens.iter().map(|&n| (0..=n).map(|_| k.embed_parts(&std::array::from_fn(|_| (r.uniform() * 2.0 - 1.0) as f32)).unwrap()).collect()).collect();
        let pairs: Vec<Vec<(&EmbedParts, &EmbedParts)>> = parts.iter().map(|p| (1..p.len()).map(|i| (&p[0], &p[i])).collect()).collect();
        for n in [19, 14] {
            for with_parts in [false, true] {
                let seqs: Vec<Seq<'_>> = xs[..n].iter().zip(&pairs).map(|(x, p)| (x.as_slice(), with_parts.then_some(p.as_slice()))).collect();
                let many = k.before_many(&seqs).unwrap();
                assert_eq!(many, narrow.before_many(&seqs).unwrap(), "{n} sequences, parts: {with_parts}");
                for (i, ((x, p), st)) in seqs.iter().zip(&many).enumerate() {
                    let one = match p {
                        Some(p) => k.before_with_parts(x, p).unwrap(),
                        None => k.before(x).unwrap(),
                    };
                    assert_eq!(*st, one, "sequence {i} of {n}, parts: {with_parts}");
                }
            }
        }
    }

    #[test]
    fn batched_heads_equal_single_heads() {
        let k = NativeKernel::from_named(&random_params(16, 12, 20, 9), "test").unwrap();
        for kern in [k.clone(), k.portable()] {
            let mut r = Rng::new(3);
            let mut vecs = |n: usize| -> Vec<Vec<f32>> { (0..9).map(|_| (0..n).map(|_| (r.uniform() * 2.0 - 1.0) as f32).collect()).collect() };
            let (hb, ha) = (vecs(12), vecs(12));
            let prefixes: Vec<Vec<f32>> = hb.iter().map(|h| kern.head_prefix(h).unwrap()).collect();
            let items: Vec<HeadInput<'_>> = (0..9).map(|i| (prefixes[i].as_slice(), ha[i].as_slice(), i as f32 * 0.1)).collect();
            let batched = kern.heads_with_prefix(&items).unwrap();
            for (i, (p, h, l)) in items.iter().enumerate() {
                assert_eq!(batched[i], kern.head_with_prefix(p, h, *l).unwrap(), "query {i}");
            }
            let bad: Vec<HeadInput<'_>> = vec![(&ha[0][..3], ha[0].as_slice(), 0.0)];
            assert!(kern.heads_with_prefix(&bad).is_err());
        }
    }

    #[test]
    fn fast_exp_is_accurate() {
        let mut worst = 0f64;
        let mut x = -80.0f32;
        while x < 80.0 {
            let want = (x as f64).exp();
            worst = worst.max(((exp_f32::<Plain>(x) as f64) - want).abs() / want);
            x += 0.0137;
        }
        assert!(worst < 5e-7, "relative error {worst}");
        assert_eq!(exp_f32::<Plain>(1e9), exp_f32::<Plain>(88.0));
        assert!(exp_f32::<Plain>(-1e9) > 0.0);
        assert!((tanh::<Plain>(0.3) - 0.3f32.tanh()).abs() < 1e-6 && (sigmoid::<Plain>(-2.0) - 0.119_202_92).abs() < 1e-6);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[cfg_attr(not(autoslo_host_avx2), ignore = "this CPU has no AVX2 and FMA: the vector activations cannot run")]
    fn vector_activations_match_scalar_ones() {
        assert_eq!(detect_simd(), Simd::Avx2Fma, "the build saw AVX2 and FMA on this CPU, the test does not");
        let xs: Vec<f32> = (0..4003).map(|i| -100.0 + i as f32 * 0.05).collect();
        for (g, f) in [(avx2::Gate::Sigmoid, sigmoid::<Plain> as fn(f32) -> f32), (avx2::Gate::Tanh, tanh::<Plain>)] {
            let mut v = xs.clone();
            // SAFETY: AVX2 and FMA were detected just above.
            unsafe { avx2::activate_all(&mut v, g) };
            for (x, y) in xs.iter().zip(&v) {
                assert!(y.is_finite() && (y - f(*x)).abs() <= 4e-7, "{x}: {y} vs {}", f(*x));
            }
        }
    }

    #[test]
    fn simd_and_portable_paths_agree() {
        let k = NativeKernel::from_named(&random_params(16, 12, 8, 5), "test").unwrap();
        let p = k.portable();
        let mut r = Rng::new(4);
        let xs: Vec<[f32; INTERACTION_DIM]> = (0..200).map(|_| std::array::from_fn(|_| (r.uniform() * 4.0 - 2.0) as f32)).collect();
        let a = predict_sequence(&k, &xs[..120], &xs[120..], 0.3).unwrap();
        let b = predict_sequence(&p, &xs[..120], &xs[120..], 0.3).unwrap();
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }

    #[test]
    fn rejects_malformed_parameters() {
        let mut p = random_params(8, 6, 5, 1);
        p.remove("head2.bias");
        assert!(NativeKernel::from_named(&p, "m").unwrap_err().to_string().contains("head2.bias"));
        let mut p = random_params(8, 6, 5, 1);
        p.insert("sigma".into(), (vec![INTERACTION_DIM], vec![0.0; INTERACTION_DIM]));
        assert!(NativeKernel::from_named(&p, "m").is_err());
        let mut p = random_params(8, 6, 5, 1);
        p.insert("emb.bias".into(), (vec![3], vec![0.0; 3]));
        assert!(NativeKernel::from_named(&p, "m").unwrap_err().to_string().contains("shape"));
    }
}
