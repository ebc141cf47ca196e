set terminal pngcairo size 1400,900 font "sans,10"
set output "/tmp/ddp-sum/p3.png"
set multiplot layout 2,2
set termoption noenhanced
set grid
set key bottom right
set xlabel "training time (s, evaluations excluded)"
set ylabel "test accuracy"
set yrange [0.80:0.9]
set xrange [0:*]
set title "100mbit: 4 workers, time to 0.88 test accuracy"
plot "docs/performance/e2e/plot-100mbit-block_top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#1f77b4" title "block_top_k 1 % + residual", \
     "docs/performance/e2e/plot-100mbit-mpi_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#d62728" title "dense fp32, MPI_Allreduce", \
     "docs/performance/e2e/plot-100mbit-ring_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#ff7f0e" title "dense fp32, ring (ZeroMQ)", \
     "docs/performance/e2e/plot-100mbit-top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#2ca02c" title "top_k 1 % + residual", \
     "docs/performance/e2e/plot-100mbit-maxmin4.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#9467bd" title "maxmin_quantize 4 bit + residual", \
     0.88 with lines lw 1.5 lc rgb "black" dt 3 title "target 0.88"
set title "500mbit: 4 workers, time to 0.88 test accuracy"
plot "docs/performance/e2e/plot-500mbit-block_top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#1f77b4" title "block_top_k 1 % + residual", \
     "docs/performance/e2e/plot-500mbit-mpi_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#d62728" title "dense fp32, MPI_Allreduce", \
     "docs/performance/e2e/plot-500mbit-ring_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#ff7f0e" title "dense fp32, ring (ZeroMQ)", \
     "docs/performance/e2e/plot-500mbit-top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#2ca02c" title "top_k 1 % + residual", \
     "docs/performance/e2e/plot-500mbit-maxmin4.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#9467bd" title "maxmin_quantize 4 bit + residual", \
     0.88 with lines lw 1.5 lc rgb "black" dt 3 title "target 0.88"
set title "1gbit: 4 workers, time to 0.88 test accuracy"
plot "docs/performance/e2e/plot-1gbit-block_top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#1f77b4" title "block_top_k 1 % + residual", \
     "docs/performance/e2e/plot-1gbit-mpi_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#d62728" title "dense fp32, MPI_Allreduce", \
     "docs/performance/e2e/plot-1gbit-ring_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#ff7f0e" title "dense fp32, ring (ZeroMQ)", \
     "docs/performance/e2e/plot-1gbit-top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#2ca02c" title "top_k 1 % + residual", \
     "docs/performance/e2e/plot-1gbit-maxmin4.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#9467bd" title "maxmin_quantize 4 bit + residual", \
     0.88 with lines lw 1.5 lc rgb "black" dt 3 title "target 0.88"
set title "no link (4 threads, local transport): the compute floor"
plot "docs/performance/e2e/plot-no_link-block_top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#1f77b4" title "block_top_k 1 % + residual", \
     "docs/performance/e2e/plot-no_link-ring_dense.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#ff7f0e" title "dense fp32, ring (ZeroMQ)", \
     "docs/performance/e2e/plot-no_link-top_k.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#2ca02c" title "top_k 1 % + residual", \
     "docs/performance/e2e/plot-no_link-maxmin4.tsv" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt 1 lc rgb "#9467bd" title "maxmin_quantize 4 bit + residual", \
     0.88 with lines lw 1.5 lc rgb "black" dt 3 title "target 0.88"
unset multiplot
