// tests/kernels/catalog_test.cpp: the kernel catalog (kernels/catalog.cpp), the backend registrations
// (kernels/registry.h) and the Dispatcher (kernels/dispatch.cpp): seam order, rows and registered
// functions in agreement, malformed rows and registrations refused, fallback resolution with its reason, strict
// mode, unknown seams and backends, CUPTI kernel-name patterns.
// Run: build/tests/kernels_tests --gtest_filter='Catalog*:Dispatcher*'
#include "kernels/catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "kernels/dispatch.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

using ::testing::HasSubstr;

DeviceInfo cpu() { return DeviceInfo{}; }
DeviceInfo gpu(int major, int minor, const std::string& dtype) {
  DeviceInfo info;
  info.cuda = true;
  info.sm_major = major;
  info.sm_minor = minor;
  info.dtype = dtype;
  return info;
}

// kernels/CMakeLists.txt derives each seam's folder from its name in kernels/seam_list.h, read as a
// lowercase identifier; the order of seams() is pinned through the lane key (tests/harness/lane_test.cpp).
TEST(Catalog, SeamsAreLowercaseIdentifiersListedOnce) {
  ASSERT_FALSE(seams().empty());
  std::set<std::string> seen;
  for (const auto& seam : seams()) {
    EXPECT_TRUE(seen.insert(seam).second) << seam << " is listed twice";
    EXPECT_FALSE(seam.empty());
    for (const char c : seam) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << seam;
  }
  EXPECT_EQ(seams().back(), "optimizer") << "the training step's optimizer runs after the model";
}

TEST(Catalog, LaneKeyOfEverySeamAndUnknownSeams) {
  for (const auto& seam : seams()) {
    const LaneKey key = lane_key_of(seam);
    EXPECT_TRUE(key == LaneKey::always || key == LaneKey::off_reference) << seam;
  }
  EXPECT_EQ(lane_key_of("attention"), LaneKey::always);
  EXPECT_EQ(lane_key_of("optimizer"), LaneKey::off_reference);
  EXPECT_THROW(lane_key_of("no_such_seam"), std::invalid_argument);
}

TEST(Catalog, EverySeamHasAnAlwaysAvailableReference) {
  for (const auto& seam : seams()) {
    const auto* ref = find_backend(seam, "reference");
    ASSERT_NE(ref, nullptr) << seam;
    EXPECT_EQ(ref->role, Role::reference) << seam;
    EXPECT_EQ(ref->fallback, "") << seam;
    ASSERT_NE(ref->unavailable_reason, nullptr) << seam;
    EXPECT_EQ(why_unavailable(*ref, cpu()), "") << seam;
    EXPECT_EQ(why_unavailable(*ref, gpu(9, 0, "bf16")), "") << seam;
    EXPECT_TRUE(has_implementation(seam, "reference")) << seam;
  }
}

TEST(Catalog, ListsTheExpectedBackends) {
  EXPECT_EQ(backend_names("attention"),
            (std::vector<std::string>{"reference", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"}));
  EXPECT_EQ(backend_names("loss"),
            (std::vector<std::string>{"reference", "chunked", "fused_cuda", "fused_cuda_fp8_rowwise"}));
  EXPECT_EQ(find_backend("loss", "chunked")->role, Role::experimental);
  // Without the fused kernel (no CUDA, fp16) the loss still avoids the full logits: chunked, then reference.
  EXPECT_EQ(find_backend("loss", "fused_cuda")->fallback, "chunked");
  EXPECT_EQ(backend_names("rope"), (std::vector<std::string>{"reference", "fused_cuda"}));
  for (const char* sdpa : {"sdpa_flash", "sdpa_cudnn", "sdpa_efficient"}) {
    const auto* row = find_backend("attention", sdpa);
    ASSERT_NE(row, nullptr) << sdpa;
    EXPECT_EQ(row->role, Role::vendor) << sdpa;
    EXPECT_EQ(row->fallback, "reference") << sdpa;
  }
  EXPECT_EQ(find_backend("attention", "fused_cuda"), nullptr);
  EXPECT_EQ(find_backend("no_such_seam", "reference"), nullptr);
}

TEST(Catalog, EveryRowHasADescriptionAndAFallbackChainEndingInTheReference) {
  for (const auto& row : catalog()) {
    EXPECT_FALSE(row.description.empty()) << row.seam << "/" << row.name;
    const BackendInfo* at = &row;
    for (int hops = 0; !at->fallback.empty(); ++hops) {
      ASSERT_LT(hops, 10) << "fallback cycle at " << row.seam << "/" << row.name;
      at = find_backend(row.seam, at->fallback);
      ASSERT_NE(at, nullptr) << row.seam << "/" << row.name << " falls back to an unlisted backend";
    }
    EXPECT_EQ(at->name, "reference") << row.seam << "/" << row.name;
  }
}

// A row whose kernels this build did not compile (no CUDA) is listed, unavailable, with no function.
bool compiled_in(const BackendInfo& row) { return row.not_built.empty(); }

// Every (seam, backend) with a registered function, read from the per-seam tables.
std::set<std::pair<std::string, std::string>> registered_functions() {
  std::set<std::pair<std::string, std::string>> rows;
  const auto& r = implementations();
#define ABLATE_COLLECT(seam, Fn, lane_key)                                            \
  for (const auto& [name, fn] : r.seam) {                                             \
    rows.insert({#seam, name});                                                       \
    EXPECT_TRUE(static_cast<bool>(fn)) << #seam << "/" << name << " is an empty function"; \
  }
  ABLATE_SEAMS(ABLATE_COLLECT)
#undef ABLATE_COLLECT
  return rows;
}

// Every registered backend appears in the catalog, has its function in this build unless it is a
// CUDA backend of a build without CUDA, and is what the Dispatcher resolves and calls when requested.
TEST(Catalog, EveryRegisteredBackendIsInTheCatalogAndTheDispatcher) {
  std::set<std::pair<std::string, std::string>> catalog_rows;
  for (const auto& row : catalog()) {
    if (!compiled_in(row)) {
      EXPECT_EQ(row.not_built, "built without CUDA") << row.seam << "/" << row.name;
      EXPECT_FALSE(has_implementation(row.seam, row.name)) << row.seam << "/" << row.name;
      continue;
    }
    catalog_rows.insert({row.seam, row.name});
    EXPECT_TRUE(has_implementation(row.seam, row.name)) << row.seam << "/" << row.name << " has no implementation";
    // A device on which the row is available, if one of these is: the Dispatcher must choose it.
    for (const auto& dev : {cpu(), gpu(9, 0, "bf16"), gpu(9, 0, "fp32")}) {
      if (!why_unavailable(row, dev).empty()) continue;
      const Dispatcher dispatcher({{row.seam, row.name}}, dev, /*strict=*/true);
      EXPECT_EQ(dispatcher.chosen(row.seam), row.name);
      break;
    }
  }
  EXPECT_EQ(registered_functions(), catalog_rows);
  EXPECT_FALSE(has_implementation("attention", "no_such_backend"));
  EXPECT_FALSE(has_implementation("no_such_seam", "reference"));
}

// Shapes a fused kernel cannot take are refused when the backends resolve (kernels/catalog.h ModelDims),
// saying which field and how to run it; unknown shapes (0) and shapes in range pass.
TEST(Catalog, FusedRowsRefuseModelShapesTheyCannotTake) {
#if defined(ABLATE_HAVE_CUDA)
  auto dev = gpu(9, 0, "bf16");
  const auto why = [&](const char* seam) { return why_unavailable(*find_backend(seam, "fused_cuda"), dev); };
  dev.model = ModelDims{.experts = 16, .ssm_heads = 32, .ssm_head_dim = 64, .ssm_state = 128, .ssm_chunk = 64,
                        .conv_width = 4};  // nam56r-small
  for (const char* seam : {"moe_router", "ssm_rotary", "ssm_scan", "causal_conv"}) EXPECT_EQ(why(seam), "") << seam;

  dev.model.conv_width = 5;
  EXPECT_THAT(why("causal_conv"), HasSubstr("model.recurrent.conv_width = 5 exceeds the 4 taps"));
  EXPECT_THAT(why("causal_conv"), HasSubstr("causal_conv = \"reference\""));
  dev.model.experts = 65;
  EXPECT_THAT(why("moe_router"), HasSubstr("model.moe.experts = 65 exceeds the 64 experts"));
  dev.model.ssm_heads = 512;  // 512 x 128 / 4 = 16384 angles a row
  EXPECT_THAT(why("ssm_rotary"), HasSubstr("exceeds the 12288 angles a row"));
  dev.model.ssm_heads = 32;
  dev.model.ssm_head_dim = 40;
  EXPECT_THAT(why("ssm_scan"), HasSubstr("model.mamba.head_dim = 40"));
  dev.model.ssm_head_dim = 128;
  dev.model.ssm_chunk = 24;
  EXPECT_THAT(why("ssm_scan"), HasSubstr("model.mamba.chunk = 24 must be 16, 32, 48 or 64"));
  dev.model.ssm_chunk = 64;
  dev.model.ssm_state = 128;
  EXPECT_EQ(why("ssm_scan"), "") << "bf16 runs take the tensor-core path: P = N = 128 at chunk 64 fits";
  dev.dtype = "fp32";
  EXPECT_THAT(why("ssm_scan"), HasSubstr("234516 bytes of shared memory"));

  // Resolution: strict refuses with the reason; otherwise the reference runs and the reason is recorded.
  dev.model.conv_width = 5;
  Resolution r;
  std::string error;
  EXPECT_FALSE(resolve("causal_conv", "fused_cuda", dev, /*strict=*/true, r, error));
  EXPECT_THAT(error, HasSubstr("model.recurrent.conv_width = 5"));
  ASSERT_TRUE(resolve("causal_conv", "fused_cuda", dev, /*strict=*/false, r, error)) << error;
  EXPECT_EQ(r.chosen, "reference");
  EXPECT_THAT(r.reason, HasSubstr("conv_width = 5"));
#else
  GTEST_SKIP() << "the fused rows are not built without a CUDA compiler";
#endif
}

TEST(Catalog, FusedCudaRowsAreExperimentalHopperKernelsWithAReason) {
  for (const char* seam : {"residual_norm", "swiglu", "moe_router", "ssm_rotary", "ssm_scan", "causal_conv", "recurrent_scan"}) {
    const auto* row = find_backend(seam, "fused_cuda");
    ASSERT_NE(row, nullptr) << seam;
    EXPECT_EQ(row->role, Role::experimental) << seam;
    EXPECT_EQ(row->fallback, "reference") << seam;
    EXPECT_FALSE(row->kernel_patterns.empty()) << seam;
#if defined(ABLATE_HAVE_CUDA)
    EXPECT_TRUE(compiled_in(*row)) << seam;
    EXPECT_EQ(why_unavailable(*row, gpu(9, 0, "bf16")), "") << seam;
    EXPECT_EQ(why_unavailable(*row, gpu(9, 0, "fp32")), "") << seam;
    EXPECT_EQ(why_unavailable(*row, cpu()), "needs a CUDA device") << seam;
    EXPECT_THAT(why_unavailable(*row, gpu(8, 0, "bf16")), HasSubstr("needs compute capability 9.0")) << seam;
    EXPECT_THAT(why_unavailable(*row, gpu(9, 0, "fp16")), HasSubstr("needs fp32 or bf16")) << seam;
#else
    EXPECT_EQ(why_unavailable(*row, gpu(9, 0, "bf16")), "built without CUDA") << seam;
    EXPECT_FALSE(has_implementation(seam, "fused_cuda")) << seam;
#endif
  }
}

// A row that would make the catalog lie is refused when the catalog is first read.
TEST(Catalog, RefusesMalformedRows) {
  const BuildFacts full{.libtorch = true, .cuda = true};
  BackendInfo reference;
  reference.name = "reference";
  reference.description = "the reference";
  reference.unavailable_reason = &availability::always;
  BackendInfo good = reference;
  good.name = "mine";
  good.role = Role::experimental;
  good.fallback = "reference";
  good.description = "a test row";
  const auto rows = checked_seam_rows("swiglu", {reference, good}, full);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].seam, "swiglu");  // set from the seam whose file lists it
  EXPECT_EQ(rows[1].not_built, "");

  auto with = [&](auto change) {
    BackendInfo row = good;
    change(row);
    return std::vector<BackendInfo>{reference, row};
  };
  const auto refused = [&](std::vector<BackendInfo> list, const std::string& why) {
    try {
      checked_seam_rows("swiglu", std::move(list), full);
      ADD_FAILURE() << "accepted a row that is " << why;
    } catch (const std::logic_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("kernels/swiglu/catalog.cpp")) << why;
    }
  };
  refused(with([](BackendInfo& r) { r.name = ""; }), "unnamed");
  refused(with([](BackendInfo& r) { r.description = ""; }), "undescribed");
  refused(with([](BackendInfo& r) { r.unavailable_reason = nullptr; }), "without an availability check");
  refused(with([](BackendInfo& r) { r.seam = "rope"; }), "of another seam");
  refused(with([](BackendInfo& r) { r.fallback = ""; }), "a second end of the chain");
  refused(with([](BackendInfo& r) { r.name = "reference"; }), "a second reference");
  refused({good, reference}, "listed before the reference");
  refused({reference, good, good}, "listed twice");
  // A capture reason exactly when the row is not always capturable.
  refused(with([](BackendInfo& r) { r.capture = Capture::never; }), "uncapturable without a reason");
  refused(with([](BackendInfo& r) { r.capture_reason = "syncs"; }), "capturable with a reason");
  EXPECT_THROW(checked_seam_rows("swiglu", {}, full), std::logic_error);

  // What the build compiled decides not_built: CUDA rows need a CUDA compiler, every row LibTorch.
  const auto cuda_row = with([](BackendInfo& r) { r.needs_nvcc = true; });
  EXPECT_EQ(checked_seam_rows("swiglu", cuda_row, full)[1].not_built, "");
  const auto no_cuda = checked_seam_rows("swiglu", cuda_row, {.libtorch = true, .cuda = false});
  EXPECT_EQ(no_cuda[0].not_built, "");
  EXPECT_EQ(no_cuda[1].not_built, "built without CUDA");
  EXPECT_EQ(why_unavailable(no_cuda[1], gpu(9, 0, "bf16")), "built without CUDA");
  const auto no_torch = checked_seam_rows("swiglu", cuda_row, {.libtorch = false, .cuda = true});
  EXPECT_EQ(no_torch[0].not_built, "built without LibTorch");
  EXPECT_EQ(no_torch[1].not_built, "built without LibTorch");
}

// A function is registered under its row's name, once, exactly when this build builds the row; every
// built row has its function.
TEST(Registry, RefusesFunctionsThatDisagreeWithTheirRows) {
  Implementations tables;
  BackendRegistry registry(tables);
  const SwigluFn fn = [](const torch::Tensor& a, const torch::Tensor& b) { return a * b; };
  registry.swiglu("reference", fn);
  EXPECT_EQ(tables.swiglu.count("reference"), 1u);
  EXPECT_THROW(registry.swiglu("reference", fn), std::logic_error);  // twice
  try {
    registry.swiglu("no_such_backend", fn);
    ADD_FAILURE() << "a function without a row was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("swiglu/no_such_backend, which has no row in kernels/swiglu/catalog.cpp"));
  }
#if defined(ABLATE_HAVE_CUDA)
  EXPECT_THROW(registry.swiglu("fused_cuda", SwigluFn()), std::logic_error);  // built, but no function
#else
  EXPECT_THROW(registry.swiglu("fused_cuda", fn), std::logic_error);  // a function for a row not built
  registry.swiglu("fused_cuda", SwigluFn());
  EXPECT_EQ(tables.swiglu.count("fused_cuda"), 0u);
#endif
  try {
    check_every_built_row_implemented(tables);
    ADD_FAILURE() << "rows without functions were accepted";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("dense_gemm/reference has a row in kernels/dense_gemm/catalog.cpp but no registered"));
  }
  EXPECT_NO_THROW(check_every_built_row_implemented(implementations()));
}

// Whole-step CUDA graph capture is a fact of each row: every row captures except where its row says
// when it cannot, with the reason (harness/compile_posture.cpp reads it for the chosen backends).
TEST(Catalog, CaptureIsDeclaredByTheRow) {
  for (const auto& row : catalog()) {
    EXPECT_EQ(row.capture == Capture::always, row.capture_reason.empty()) << row.seam << "/" << row.name;
    EXPECT_EQ(why_not_capturable(row, /*dropless_moe=*/false).empty(), row.capture != Capture::never)
        << row.seam << "/" << row.name;
  }
  // The standard MoE path syncs with the host in dropless mode only; grouped_mm never does.
  const auto* standard = find_backend("moe_dispatch", "reference");
  ASSERT_NE(standard, nullptr);
  EXPECT_EQ(standard->capture, Capture::not_when_dropless);
  EXPECT_EQ(why_not_capturable(*standard, /*dropless_moe=*/false), "");
  EXPECT_THAT(why_not_capturable(*standard, /*dropless_moe=*/true),
              HasSubstr("in dropless MoE mode (model.moe.capacity_factor = 0) reads the largest expert load"));
  EXPECT_THAT(why_not_capturable(*standard, true), HasSubstr("host sync cannot be captured"));
  EXPECT_EQ(find_backend("moe_dispatch", "grouped_mm")->capture, Capture::always);

  BackendInfo row;
  EXPECT_EQ(why_not_capturable(row, true), "");
  row.capture = Capture::never;
  row.capture_reason = "syncs with the host";
  EXPECT_EQ(why_not_capturable(row, false), "syncs with the host");
  EXPECT_EQ(why_not_capturable(row, true), "syncs with the host");
  EXPECT_STREQ(capture_name(Capture::always), "always");
  EXPECT_STREQ(capture_name(Capture::never), "never");
  EXPECT_STREQ(capture_name(Capture::not_when_dropless), "not_when_dropless");
}

TEST(Catalog, RoleNames) {
  EXPECT_STREQ(role_name(Role::keep), "keep");
  EXPECT_STREQ(role_name(Role::borderline), "borderline");
  EXPECT_STREQ(role_name(Role::experimental), "experimental");
  EXPECT_STREQ(role_name(Role::vendor), "vendor");
  EXPECT_STREQ(role_name(Role::reference), "reference");
}

// Kernel names recorded by the PyTorch profiler on an H100 (LibTorch 2.11, cuDNN 9.19) for one
// forward + backward of each SDPA backend: each must be claimed by exactly its own row.
TEST(Catalog, KernelPatternsIdentifyTheVendorAttentionKernels) {
  const std::vector<std::pair<std::string, std::string>> observed = {
      {"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96, 128, 64, 4, false, false, "
       "cutlass::bfloat16_t, Flash_kernel_traits<96, 128, 64, 4, cutlass::bfloat16_t> >, false, true>",
       "sdpa_flash"},
      {"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<96, 64, 128>>",
       "sdpa_flash"},
      {"void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<96, 64, 128>>", "sdpa_flash"},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
       "sdpa_cudnn"},
      {"cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
       "sdpa_cudnn"},
      {"void cudnn::fusion::compute_dot_do_o<true>(void const*, void const*, void*)", "sdpa_cudnn"},
      {"fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)",
       "sdpa_efficient"},
      {"fmha_cutlassB_bf16_aligned_128x128_k128_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<...>::Params)",
       "sdpa_efficient"},
  };
  for (const auto& [kernel, expected] : observed) {
    std::vector<std::string> claimed_by;
    for (const auto& row : catalog())
      for (const auto& pattern : row.kernel_patterns)
        if (kernel.find(pattern) != std::string::npos) {
          claimed_by.push_back(row.name);
          break;
        }
    EXPECT_EQ(claimed_by, std::vector<std::string>{expected}) << kernel;
  }
  // A plain elementwise kernel of the reference path belongs to no vendor row.
  for (const auto& row : catalog())
    for (const auto& pattern : row.kernel_patterns)
      EXPECT_EQ(std::string("void at::native::vectorized_elementwise_kernel<4>").find(pattern), std::string::npos);
}

TEST(CatalogResolve, AvailableBackendIsChosen) {
  Resolution r;
  std::string error;
  ASSERT_TRUE(resolve("attention", "sdpa_flash", gpu(9, 0, "bf16"), /*strict=*/true, r, error)) << error;
  EXPECT_EQ(r.seam, "attention");
  EXPECT_EQ(r.requested, "sdpa_flash");
  EXPECT_EQ(r.chosen, "sdpa_flash");
  EXPECT_EQ(r.reason, "requested backend is available");
  EXPECT_EQ(error, "");
}

TEST(CatalogResolve, FallsBackWithTheReason) {
  Resolution r;
  std::string error;
  ASSERT_TRUE(resolve("attention", "sdpa_flash", cpu(), /*strict=*/false, r, error)) << error;
  EXPECT_EQ(r.chosen, "reference");
  EXPECT_EQ(r.reason, "sdpa_flash unavailable: needs a CUDA device; fell back to reference");

  ASSERT_TRUE(resolve("attention", "sdpa_flash", gpu(7, 5, "bf16"), false, r, error));
  EXPECT_EQ(r.chosen, "reference");
  EXPECT_EQ(r.reason,
            "sdpa_flash unavailable: needs compute capability 8.0 or newer (device has 7.5); fell back to reference");

  ASSERT_TRUE(resolve("attention", "sdpa_flash", gpu(9, 0, "fp32"), false, r, error));
  EXPECT_EQ(r.chosen, "reference");
  EXPECT_THAT(r.reason, HasSubstr("needs bf16 or fp16 inputs (run dtype is fp32)"));

  ASSERT_TRUE(resolve("attention", "sdpa_cudnn", gpu(8, 0, "bf16"), false, r, error));
  EXPECT_EQ(r.chosen, "reference");
  EXPECT_THAT(r.reason, HasSubstr("sdpa_cudnn unavailable: needs compute capability 9.0"));

  ASSERT_TRUE(resolve("attention", "sdpa_efficient", gpu(8, 0, "fp32"), false, r, error));
  EXPECT_EQ(r.chosen, "sdpa_efficient");

  ASSERT_TRUE(resolve("loss", "chunked", cpu(), true, r, error));
  EXPECT_EQ(r.chosen, "chunked");
}

TEST(CatalogResolve, StrictModeRefusesToFallBack) {
  Resolution r;
  std::string error;
  EXPECT_FALSE(resolve("attention", "sdpa_cudnn", cpu(), /*strict=*/true, r, error));
  EXPECT_THAT(error, HasSubstr("sdpa_cudnn unavailable: needs a CUDA device"));
  EXPECT_THAT(error, HasSubstr("strict"));
  EXPECT_EQ(r.chosen, "");
}

TEST(CatalogResolve, UnknownNamesAreErrorsThatListTheKnownOnes) {
  Resolution r;
  std::string error;
  EXPECT_FALSE(resolve("attention", "fused_cuda", cpu(), false, r, error));
  EXPECT_EQ(error,
            "unknown backend 'fused_cuda' for seam 'attention': known backends are reference, sdpa_flash, sdpa_cudnn, "
            "sdpa_efficient");
  EXPECT_FALSE(resolve("atention", "reference", cpu(), false, r, error));
  EXPECT_THAT(error, HasSubstr("unknown seam 'atention'"));
  std::string known;
  for (const auto& seam : seams()) known += (known.empty() ? "" : ", ") + seam;
  EXPECT_THAT(error, HasSubstr("known seams are " + known));
}

TEST(Dispatcher, DefaultIsReferenceEverywhereInSeamOrder) {
  const Dispatcher dispatcher;
  ASSERT_EQ(dispatcher.resolutions().size(), seams().size());
  for (size_t i = 0; i < seams().size(); ++i) {
    EXPECT_EQ(dispatcher.resolutions()[i].seam, seams()[i]);
    EXPECT_EQ(dispatcher.resolutions()[i].requested, "reference");
    EXPECT_EQ(dispatcher.chosen(seams()[i]), "reference");
  }
  EXPECT_THROW(dispatcher.chosen("no_such_seam"), std::invalid_argument);
}

TEST(Dispatcher, RecordsRequestedChosenAndReason) {
  const Dispatcher dispatcher({{"attention", "sdpa_flash"}, {"loss", "chunked"}}, cpu(), /*strict=*/false);
  EXPECT_EQ(dispatcher.chosen("attention"), "reference");
  EXPECT_EQ(dispatcher.chosen("loss"), "chunked");
  const auto attention = std::find_if(dispatcher.resolutions().begin(), dispatcher.resolutions().end(),
                                      [](const Resolution& r) { return r.seam == "attention"; });
  ASSERT_NE(attention, dispatcher.resolutions().end());
  EXPECT_EQ(attention->requested, "sdpa_flash");
  EXPECT_EQ(attention->reason, "sdpa_flash unavailable: needs a CUDA device; fell back to reference");
}

TEST(Dispatcher, RejectsUnknownNamesAndStrictFallbacks) {
  try {
    Dispatcher({{"attn", "reference"}}, cpu(), false);
    FAIL() << "unknown seam accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown seam 'attn'"));
  }
  try {
    Dispatcher({{"loss", "fused"}}, cpu(), false);
    FAIL() << "unknown backend accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown backend 'fused' for seam 'loss': known backends are reference, chunked"));
  }
  EXPECT_THROW(Dispatcher({{"attention", "sdpa_flash"}}, cpu(), /*strict=*/true), std::invalid_argument);
}

TEST(Dispatcher, DescribesTheDevice) {
  const auto info = describe_device(torch::kCPU, torch::kBFloat16);
  EXPECT_FALSE(info.cuda);
  EXPECT_EQ(info.dtype, "bf16");
  EXPECT_EQ(describe_device(torch::kCPU, torch::kFloat).dtype, "fp32");
  EXPECT_EQ(describe_device(torch::kCPU, torch::kDouble).dtype, "fp64");
  if (torch::cuda::is_available()) {
    const auto cuda = describe_device(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
    EXPECT_TRUE(cuda.cuda);
    EXPECT_GE(cuda.sm_major, 5);
  }
}

// A test builds a Dispatcher whose seam calls another implementation while reporting its chosen
// backend: here loss reports reference and runs chunked (whose autograd node is its own Function).
TEST(Dispatcher, WithImplementationForTestingCallsItUnderTheChosenName) {
  const Dispatcher chosen;
  const Dispatcher forced = chosen.with_implementation_for_testing("loss", "chunked");
  EXPECT_EQ(forced.chosen("loss"), "reference");
  ASSERT_EQ(forced.resolutions().size(), chosen.resolutions().size());
  for (size_t i = 0; i < chosen.resolutions().size(); ++i)
    EXPECT_EQ(forced.resolutions()[i].chosen, chosen.resolutions()[i].chosen) << chosen.resolutions()[i].seam;

  const auto hidden = torch::randn({6, 4}).requires_grad_();
  const auto head = torch::randn({10, 4});
  const auto targets = torch::randint(0, 10, {6}, torch::kLong);
  const auto mask = torch::ones({6});
  const auto node = [](const torch::Tensor& loss) { return loss.grad_fn()->name(); };
  const auto by_reference = chosen.loss(hidden, head, targets, mask);
  const auto by_chunked = forced.loss(hidden, head, targets, mask);
  EXPECT_THAT(node(by_chunked), HasSubstr("ChunkedLinearCrossEntropy"));
  EXPECT_THAT(node(by_reference), ::testing::Not(HasSubstr("ChunkedLinearCrossEntropy")));
  EXPECT_NEAR(by_chunked.item<double>(), by_reference.item<double>(), 1e-5);
  // The original is unchanged; unknown seams and implementations are refused.
  EXPECT_THAT(node(chosen.loss(hidden, head, targets, mask)), ::testing::Not(HasSubstr("ChunkedLinearCrossEntropy")));
  EXPECT_THROW(chosen.with_implementation_for_testing("no_such_seam", "reference"), std::invalid_argument);
  EXPECT_THROW(chosen.with_implementation_for_testing("loss", "no_such_backend"), std::invalid_argument);
}

}  // namespace
}  // namespace ablate::kernels
