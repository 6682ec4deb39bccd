#pragma once

// Incremental decoding of the zoo gpt by the portable kernels (docs/DETERMINISM.md, "Inference in
// portable mode"): each position is computed once, from its token and the rows kept of the
// positions before it, and the logits of the newest position are the bits of the last row of the
// forward program over all of them (zoo.h, forwardOf(gptStep(...))). That holds because every
// instruction of the gpt's forward pass computes a position's row from that position's row alone
// (embedding, LayerNorm, linear layers, GELU, residual sums: their sums run over one row's
// elements), except attention, whose last row attentionLastRow computes in attentionForward's
// order. No torch, no Qt.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera::compute::portable {

class GptDecoder {
public:
    struct Sizes {
        std::int64_t vocabulary = 0, layers = 0, heads = 0, width = 0, context = 0;
        bool tied = true;
    };
    // The model's parameters by name ("transformer.wte.weight"), float32 in the shapes gptStep
    // names; a missing one leaves the decoder invalid (missing() names it).
    using Parameter = std::function<const float*(const std::string& name)>;
    GptDecoder(Sizes sizes, const Parameter& parameter, int threads = 1);

    const std::string& missing() const { return m_missing; }
    // Positions computed so far (at most the context).
    std::int64_t positions() const { return m_positions; }
    void reset() { m_positions = 0; }
    // Computes the next position from `token` and returns its logits [vocabulary]; null for a
    // token outside the vocabulary or a position past the context (nothing computed).
    const std::vector<float>* push(std::int64_t token);

private:
    struct Layer {
        const float *ln1Weight, *ln1Bias, *attnWeight, *attnBias, *projWeight, *projBias, *ln2Weight, *ln2Bias, *fcWeight,
            *fcBias, *mlpProjWeight, *mlpProjBias;
        std::vector<float> qkv; // [positions, 3 width]: every position's so far
    };
    Sizes m_sizes;
    int m_threads;
    std::string m_missing;
    const float *m_wte = nullptr, *m_wpe = nullptr, *m_lnfWeight = nullptr, *m_lnfBias = nullptr, *m_head = nullptr;
    std::vector<Layer> m_layers;
    std::int64_t m_positions = 0;
    std::vector<float> m_x, m_normed, m_attended, m_projected, m_hidden, m_activated, m_logits;
};

} // namespace tessera::compute::portable
