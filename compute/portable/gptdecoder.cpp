#include "gptdecoder.h"

#include "kernels.h"

namespace tessera::compute::portable {

GptDecoder::GptDecoder(Sizes sizes, const Parameter& parameter, int threads)
    : m_sizes(sizes)
    , m_threads(threads)
{
    auto take = [&](const std::string& name) {
        const float* memory = parameter(name);
        if (!memory && m_missing.empty())
            m_missing = name;
        return memory;
    };
    m_wte = take("transformer.wte.weight");
    m_wpe = take("transformer.wpe.weight");
    for (std::int64_t i = 0; i < sizes.layers; ++i) {
        const std::string n = "transformer.h." + std::to_string(i);
        Layer layer { take(n + ".ln_1.weight"), take(n + ".ln_1.bias"), take(n + ".attn.c_attn.weight"),
            take(n + ".attn.c_attn.bias"), take(n + ".attn.c_proj.weight"), take(n + ".attn.c_proj.bias"),
            take(n + ".ln_2.weight"), take(n + ".ln_2.bias"), take(n + ".mlp.c_fc.weight"), take(n + ".mlp.c_fc.bias"),
            take(n + ".mlp.c_proj.weight"), take(n + ".mlp.c_proj.bias"), {} };
        m_layers.push_back(std::move(layer));
    }
    m_lnfWeight = take("transformer.ln_f.weight");
    m_lnfBias = take("transformer.ln_f.bias");
    m_head = sizes.tied ? m_wte : take("lm_head.weight");
    const auto C = std::size_t(sizes.width);
    m_x.resize(C);
    m_normed.resize(C);
    m_attended.resize(C);
    m_projected.resize(C);
    m_hidden.resize(4 * C);
    m_activated.resize(4 * C);
    m_logits.resize(std::size_t(sizes.vocabulary));
}

const std::vector<float>* GptDecoder::push(std::int64_t token)
{
    const std::int64_t C = m_sizes.width, t = m_positions;
    if (!m_missing.empty() || token < 0 || token >= m_sizes.vocabulary || t >= m_sizes.context)
        return nullptr;
    embedForward(&token, m_wte, m_wpe + t * C, m_x.data(), 1, 1, C);
    for (auto& layer : m_layers) {
        layerNormForward(m_x.data(), layer.ln1Weight, layer.ln1Bias, m_normed.data(), 1, C);
        layer.qkv.resize(std::size_t((t + 1) * 3 * C)); // grows with the positions computed
        float* qkv = layer.qkv.data() + t * 3 * C;
        linearForward(m_normed.data(), layer.attnWeight, layer.attnBias, qkv, 1, C, 3 * C, m_threads);
        attentionLastRow(layer.qkv.data(), m_attended.data(), t + 1, m_sizes.heads, C);
        linearForward(m_attended.data(), layer.projWeight, layer.projBias, m_projected.data(), 1, C, C, m_threads);
        add(m_x.data(), m_projected.data(), m_x.data(), C);
        layerNormForward(m_x.data(), layer.ln2Weight, layer.ln2Bias, m_normed.data(), 1, C);
        linearForward(m_normed.data(), layer.fcWeight, layer.fcBias, m_hidden.data(), 1, C, 4 * C, m_threads);
        geluForward(m_hidden.data(), m_activated.data(), 4 * C);
        linearForward(m_activated.data(), layer.mlpProjWeight, layer.mlpProjBias, m_projected.data(), 1, 4 * C, C, m_threads);
        add(m_x.data(), m_projected.data(), m_x.data(), C);
    }
    layerNormForward(m_x.data(), m_lnfWeight, m_lnfBias, m_normed.data(), 1, C);
    linearForward(m_normed.data(), m_head, nullptr, m_logits.data(), 1, C, m_sizes.vocabulary, m_threads);
    ++m_positions;
    return &m_logits;
}

} // namespace tessera::compute::portable
