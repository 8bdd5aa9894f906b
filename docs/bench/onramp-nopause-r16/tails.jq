# Per variant: each size bucket's background-flow tail, at the percentile
# the bench judged it (tail_p), in ms.
.variants[] | "\(.name): " + ([.fct[] | select(.bucket != "all") | "\(.bucket) p\(.tail_p) \(.tail_us / 1000 * 10 | round / 10) ms"] | join(", "))
