# Every numeric field of sluice-plan's input is range-checked before it is converted: a value past
# its type or its sane range must be refused (exit 1) with a message naming the field, never
# truncated (staleness 2^32 used to run as 0, bits 2^33 + 4 as 4, a bucket cap of 2^44 + 1 MiB as
# 1 MiB) and never left to run for minutes (repeat 10^7).
# cmake -DPLAN=<sluice-plan> -DDIR=<scratch dir> -P range_checks.cmake
set(base [=[{"workers": [{"fixed_seconds": 0.01, "per_sample_seconds": 0.006, "max_batch": 16},
             {"fixed_seconds": 0.01, "per_sample_seconds": 0.006, "max_batch": 16}],
 "links": [{"group": 2, "mbps": 100, "latency_us": 200}],
 "model": [{"name": "w", "shape": [1000, 100], "repeat": 2}],
 "codecs": [{"codec": "identity"}, {"codec": "maxmin_quantize", "bits": 4, "bucket": 1024},
            {"codec": "block_top_k", "ratio": 0.01, "block": 16}],
 "global_batches": [8, 16], "bucket_caps_mib": [4], "staleness": [0, 1],
 "fixed": {"staleness": 1, "bucket_cap_mib": 4}}]=])
file(MAKE_DIRECTORY ${DIR})
set(failures 0)

# check(NAME FROM TO EXPECT): replaces FROM by TO in the base input; EXPECT empty: must succeed;
# otherwise must fail with EXPECT in its message.
function(check name from to expect)
  string(FIND "${base}" "${from}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: '${from}' is not in the base input")
  endif()
  string(REPLACE "${from}" "${to}" input "${base}")
  file(WRITE ${DIR}/${name}.json "${input}")
  execute_process(COMMAND ${PLAN} ${DIR}/${name}.json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 30)
  if(expect STREQUAL "")
    if(NOT rc EQUAL 0)
      message(SEND_ERROR "${name}: exit ${rc}, expected success: ${err}")
    endif()
  elseif(rc EQUAL 0 OR NOT rc EQUAL 1)
    message(SEND_ERROR "${name}: exit '${rc}', expected 1 (refused): ${out}")
  else()
    string(FIND "${err}" "${expect}" found)
    if(found EQUAL -1)
      message(SEND_ERROR "${name}: the message does not name '${expect}': ${err}")
    endif()
  endif()
endfunction()

check(base "\"staleness\": [0, 1]" "\"staleness\": [0, 1]" "")
check(staleness_2p32 "\"staleness\": [0, 1]" "\"staleness\": [0, 4294967296]" "staleness: 4294967296")
check(staleness_3 "\"staleness\": [0, 1]" "\"staleness\": [3]" "staleness: 3")
check(fixed_staleness_2p32 "\"fixed\": {\"staleness\": 1" "\"fixed\": {\"staleness\": 4294967296" "fixed.staleness")
check(bits_2p33_4 "\"bits\": 4" "\"bits\": 8589934596" "codecs[1] bits")
check(bits_9 "\"bits\": 4" "\"bits\": 9" "codecs[1] bits")
check(bucket_2p33 "\"bucket\": 1024" "\"bucket\": 8589934592" "codecs[1] bucket")
check(block_2p40 "\"block\": 16" "\"block\": 1099511627776" "codecs[2] block")
check(cap_2p44_1 "\"bucket_caps_mib\": [4]" "\"bucket_caps_mib\": [17592186044417]" "bucket_caps_mib")
check(fixed_cap_2p44_1 "\"bucket_cap_mib\": 4" "\"bucket_cap_mib\": 17592186044417" "fixed.bucket_cap_mib")
check(repeat_1e7 "\"repeat\": 2" "\"repeat\": 10000000" "model[0] repeat")
check(repeat_negative "\"repeat\": 2" "\"repeat\": -1" "model[0] repeat")
check(repeat_2p64_1 "\"repeat\": 2" "\"repeat\": 18446744073709551615" "model[0] repeat")
check(max_batch_2p32 "\"max_batch\": 16}," "\"max_batch\": 4294967296}," "workers[0] max_batch")
check(group_2p40 "\"group\": 2" "\"group\": 1099511627776" "links[0] group")
check(global_batch_2p40 "\"global_batches\": [8, 16]" "\"global_batches\": [8, 1099511627776]" "global_batches")
check(shape_2p41 "\"shape\": [1000, 100]" "\"shape\": [2199023255552, 100]" "model[0] shape")
check(shape_float "\"shape\": [1000, 100]" "\"shape\": [1000.5, 100]" "model[0] shape")

# Measured runs (efficiency.runs, fitted by fit_efficiency): each field checked and named.
set(gb "\"global_batches\": [8, 16]")
set(runs "{\"density\": 1, \"staleness\": 0, \"global_batch\": 16, \"steps\": 900}, {\"density\": 0.01, \"staleness\": 1, \"global_batch\": 16, \"steps\": 1400}")
check(runs_ok "${gb}" "${gb}, \"efficiency\": {\"runs\": [${runs}]}" "")
check(runs_staleness_3 "${gb}" "${gb}, \"efficiency\": {\"runs\": [${runs}, {\"staleness\": 3, \"global_batch\": 16, \"steps\": 9}]}"
      "efficiency.runs[2] staleness")
check(runs_batch_2p40 "${gb}" "${gb}, \"efficiency\": {\"runs\": [${runs}, {\"global_batch\": 1099511627776, \"steps\": 9}]}"
      "efficiency.runs[2] global_batch")
check(runs_no_steps "${gb}" "${gb}, \"efficiency\": {\"runs\": [${runs}, {\"global_batch\": 16}]}"
      "efficiency.runs[2]: a run is")
check(runs_no_dense "${gb}"
      "${gb}, \"efficiency\": {\"runs\": [{\"density\": 0.01, \"global_batch\": 16, \"steps\": 1400}]}"
      "no dense staleness-0 run")
check(runs_density_2 "${gb}" "${gb}, \"efficiency\": {\"runs\": [${runs}, {\"density\": 2, \"global_batch\": 16, \"steps\": 9}]}"
      "run 2 has density 2")

# The two-tier topology (links made from groups, per-tier rates and GPU speeds): every field
# range-checked with a message naming it.
set(base [=[{"workers": [{"fixed_seconds": 0.001, "per_sample_seconds": 0.0003, "max_batch": 512}],
 "topology": {"groups": 2, "group_size": 2, "intra_mbps": 10000, "inter_mbps": 100, "intra_latency_us": 20,
              "inter_latency_us": 200, "exchange": "hierarchical", "gpu_speeds": [1, 1, 1, 0.5]},
 "model": [{"name": "w", "shape": [1000, 100], "repeat": 2}],
 "codecs": [{"codec": "identity"}, {"codec": "block_top_k", "ratio": 0.01, "block": 16}],
 "global_batches": [256], "bucket_caps_mib": [4], "staleness": [1]}]=])
check(topology_base "\"groups\": 2" "\"groups\": 2" "")
check(topology_flat "\"exchange\": \"hierarchical\"" "\"exchange\": \"flat\"" "")
check(topology_groups_0 "\"groups\": 2" "\"groups\": 0" "topology.groups")
check(topology_groups_2p40 "\"groups\": 2" "\"groups\": 1099511627776" "topology.groups")
check(topology_groups_ranks "\"groups\": 2" "\"groups\": 3" "topology.gpu_speeds")
check(topology_group_size_float "\"group_size\": 2" "\"group_size\": 2.5" "topology.group_size")
check(topology_inter_0 "\"inter_mbps\": 100" "\"inter_mbps\": 0" "topology.inter_mbps")
check(topology_inter_huge "\"inter_mbps\": 100" "\"inter_mbps\": 1e300" "topology.inter_mbps")
check(topology_intra_string "\"intra_mbps\": 10000" "\"intra_mbps\": \"fast\"" "topology.intra_mbps")
check(topology_latency_negative "\"inter_latency_us\": 200" "\"inter_latency_us\": -1" "inter_latency_us")
check(topology_latency_huge "\"inter_latency_us\": 200" "\"inter_latency_us\": 1e12" "topology.inter_latency_us")
check(topology_exchange "\"exchange\": \"hierarchical\"" "\"exchange\": \"ring\"" "topology.exchange")
check(topology_speed_0 "[1, 1, 1, 0.5]" "[1, 1, 1, 0]" "topology.gpu_speeds[3]")
check(topology_speed_count "[1, 1, 1, 0.5]" "[1, 1, 0.5]" "topology.gpu_speeds")
check(topology_missing_inter "\"inter_mbps\": 100," "" "inter_mbps")
check(topology_and_links "\"topology\"" "\"links\": [{\"group\": 4}], \"topology\"" "either")
