// The built-in policies conform to their concepts: every codec is a Codec (and the sparse ones a
// SparseCodec) for float, half and bfloat16, every feedback a FeedbackFor any codec, every
// optimizer an Optimizer, the in-process transports Transports. Checked here once rather than in
// every translation unit that includes a policy (the engine transports, mpi_transport and
// zmq_transport, assert theirs in their headers). The binary's existence proves them.
#include <sluice/compress/block_top_k.hpp>
#include <sluice/compress/cast.hpp>
#include <sluice/compress/identity.hpp>
#include <sluice/compress/maxmin_quantize.hpp>
#include <sluice/compress/power_sgd.hpp>
#include <sluice/compress/qsgd.hpp>
#include <sluice/compress/random_k.hpp>
#include <sluice/compress/sign.hpp>
#include <sluice/compress/threshold_top_k.hpp>
#include <sluice/compress/top_k.hpp>
#include <sluice/feedback/ef21.hpp>
#include <sluice/feedback/momentum_correction.hpp>
#include <sluice/feedback/no_feedback.hpp>
#include <sluice/feedback/residual.hpp>
#include <sluice/optim/adam.hpp>
#include <sluice/optim/adamw.hpp>
#include <sluice/optim/sgd.hpp>
#include <sluice/transport/fault.hpp>
#include <sluice/transport/group.hpp>
#include <sluice/transport/local.hpp>

namespace sluice {

// compress/block_top_k.hpp
static_assert(Codec<block_top_k, float> && Codec<block_top_k, half> && Codec<block_top_k, bfloat16>);
static_assert(SparseCodec<block_top_k, float> && SparseCodec<block_top_k, half> && SparseCodec<block_top_k, bfloat16>);
// compress/cast.hpp
static_assert(Codec<cast, float> && Codec<cast, half> && Codec<cast, bfloat16>);
// compress/identity.hpp
static_assert(Codec<identity, float> && Codec<identity, half> && Codec<identity, bfloat16>);
// compress/maxmin_quantize.hpp
static_assert(Codec<maxmin_quantize, float> && Codec<maxmin_quantize, half> && Codec<maxmin_quantize, bfloat16>);
// compress/power_sgd.hpp
static_assert(Codec<power_sgd, float> && Codec<power_sgd, half> && Codec<power_sgd, bfloat16>);
// compress/qsgd.hpp
static_assert(Codec<qsgd, float> && Codec<qsgd, half> && Codec<qsgd, bfloat16>);
// compress/random_k.hpp
static_assert(Codec<random_k, float> && Codec<random_k, half> && Codec<random_k, bfloat16>);
static_assert(SparseCodec<random_k, float> && SparseCodec<random_k, half> && SparseCodec<random_k, bfloat16>);
// compress/sign.hpp
static_assert(Codec<sign, float> && Codec<sign, half> && Codec<sign, bfloat16>);
// compress/threshold_top_k.hpp
static_assert(Codec<threshold_top_k, float> && Codec<threshold_top_k, half> && Codec<threshold_top_k, bfloat16>);
static_assert(SparseCodec<threshold_top_k, float> && SparseCodec<threshold_top_k, half> &&
              SparseCodec<threshold_top_k, bfloat16>);
// compress/top_k.hpp
static_assert(Codec<top_k, float> && Codec<top_k, half> && Codec<top_k, bfloat16>);
static_assert(SparseCodec<top_k, float> && SparseCodec<top_k, half> && SparseCodec<top_k, bfloat16>);
// feedback/ef21.hpp
static_assert(FeedbackFor<ef21, detail::compress::codec_archetype>);
// feedback/momentum_correction.hpp
static_assert(FeedbackFor<momentum_correction, detail::compress::codec_archetype>);
// feedback/no_feedback.hpp
static_assert(FeedbackFor<no_feedback, detail::compress::codec_archetype>);
// feedback/residual.hpp
static_assert(FeedbackFor<residual, detail::compress::codec_archetype>);
// optim/adam.hpp
static_assert(Optimizer<adam>);
// optim/adamw.hpp
static_assert(Optimizer<adamw>);
// optim/sgd.hpp
static_assert(Optimizer<sgd>);
// transport/fault.hpp
static_assert(Transport<faulty<local_transport>>);
// transport/group.hpp
static_assert(Transport<group<local_transport>>);
// transport/local.hpp
static_assert(Transport<local_transport>);

}  // namespace sluice
