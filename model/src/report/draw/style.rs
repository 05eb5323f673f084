//! What the page looks like: its inline style sheet, and the legend above the first section.

/// What each shape means, above the first section.
pub(crate) const LEGEND: &str = "<div class=\"tl-legend\"><b>Reading the timelines.</b> x is the step number \
(the model has no clock); the grey band is a process (or an allocation's runner) alive, the \
green line under it a service registered in the load balancer. \
<span><svg width=\"14\" height=\"14\"><rect class=\"tl-k-deregistered\" x=\"1\" y=\"1\" width=\"12\" height=\"12\"/></svg> services deregistered (pre-kill hooks ran)</span> \
<span><svg width=\"14\" height=\"14\"><path class=\"tl-k-signal\" d=\"M1 13H13L7 0Z\"/></svg> kill signal</span> \
<span><svg width=\"14\" height=\"14\"><path class=\"tl-k-sigkill\" d=\"M1 1L13 13M13 1L1 13\"/></svg> SIGKILL</span> \
<span><svg width=\"14\" height=\"14\"><circle class=\"tl-k-exit\" cx=\"7\" cy=\"7\" r=\"6\"/></svg> task exit</span> \
<span><svg width=\"30\" height=\"14\"><rect class=\"tl-k-waited\" x=\"1\" y=\"2\" width=\"28\" height=\"10\"/></svg> delay waited</span> \
<span><svg width=\"30\" height=\"14\"><rect class=\"tl-k-cut\" x=\"1\" y=\"2\" width=\"24\" height=\"10\"/><path class=\"tl-k-stop\" d=\"M26 0V14\"/></svg> delay cut short</span> \
<span><svg width=\"14\" height=\"14\"><path class=\"tl-k-skipped\" d=\"M7 0V14\"/></svg> delay skipped</span> \
<span><svg width=\"16\" height=\"14\"><path class=\"tl-k-request\" d=\"M8 0L15 7L8 14L1 7Z\"/></svg> operator request</span> \
<span><svg width=\"14\" height=\"14\"><path class=\"tl-k-flag\" d=\"M3 14V0L13 4L3 7\"/></svg> flag set or erased on the server</span> \
<span><svg width=\"14\" height=\"14\"><path class=\"tl-k-stopsign\" d=\"M4 1H10L13 4V10L10 13H4L1 10V4Z\"/></svg> desired stop</span> \
<span><svg width=\"14\" height=\"14\"><path class=\"tl-k-poststop\" d=\"M1 7L4 1H10L13 7L10 13H4Z\"/></svg> poststop task</span> \
<span><svg width=\"2\" height=\"14\"><path class=\"tl-k-broken\" d=\"M1 0V14\"/></svg> invariant broken</span> \
Hover a mark for the step's full text.</div>\n";

pub(crate) const STYLE: &str = "
body { font: 15px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; color: #1d1d1f; margin: 24px; max-width: none; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 0 0 2px; }
.tl-section { border-top: 2px solid #d0d0d8; padding-top: 14px; margin-top: 22px; }
.tl-demand { margin: 2px 0; font-size: 16px; }
.tl-meta, .tl-note { color: #555; margin: 2px 0 8px; }
.tl-holds { font-size: 18px; font-weight: 600; color: #1b5e20; }
.tl-legend { background: #f6f6f9; border: 1px solid #e0e0e8; padding: 8px 12px; margin: 12px 0; font-size: 13px; }
.tl-legend span { white-space: nowrap; margin-right: 12px; }
.tl-legend svg { vertical-align: middle; overflow: visible; }
.tl-scroll { overflow-x: auto; }
svg.tl { font: 11px ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace; display: block; }
.tl-lane-bg { fill: #ffffff; }
.tl-lane-operator .tl-lane-bg, .tl-lane-alloc .tl-lane-bg { fill: #f3f4f8; }
.tl-lane-label { font-weight: 600; fill: #222; }
.tl-lane-task .tl-lane-label { font-weight: 400; }
.tl-lane-role { fill: #777; font-style: italic; }
.tl-axis line { stroke: #e2e2ea; }
.tl-axis text { text-anchor: middle; fill: #666; }
.tl-axis .tl-axis-title { text-anchor: start; }
.tl-band-process { fill: #dcdde3; }
.tl-band-service { stroke: #2e7d32; stroke-width: 3; }
.tl-ev text { fill: #222; paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.tl-ev path, .tl-ev rect, .tl-ev circle { stroke: #222; stroke-width: 1.5; fill: #fff; }
.tl-ev-deregistered rect, .tl-k-deregistered { fill: #2e7d32; stroke: #1b5e20; }
.tl-ev-registered rect { fill: #fff; stroke: #2e7d32; }
.tl-ev-signal path, .tl-k-signal { fill: #c62828; stroke: #8e0000; }
.tl-ev-sigkill path, .tl-k-sigkill { stroke: #6a1b9a; stroke-width: 3; }
.tl-ev-exit circle, .tl-k-exit { fill: #333; }
.tl-ev-started circle { fill: #fff; }
.tl-ev-request path, .tl-k-request { fill: #1565c0; stroke: #0d47a1; }
.tl-ev-poststop path, .tl-k-poststop { fill: #fff; stroke: #1565c0; stroke-width: 2.5; }
.tl-ev-flag path, .tl-k-flag { stroke: #e65100; stroke-width: 2; fill: #ffb74d; }
.tl-ev-stop path, .tl-k-stopsign { fill: #b71c1c; stroke: #7f0000; }
.tl-ev-placed path { stroke-width: 3; }
.tl-ev-delay-waited rect, .tl-ev-delay-exited rect, .tl-k-waited { fill: #f9a825; stroke: #a86d00; }
.tl-ev-delay-waiting rect { fill: #fde9b0; stroke: #a86d00; stroke-dasharray: 4 3; }
.tl-ev-delay-waiting .tl-open { fill: none; stroke: #a86d00; }
.tl-ev-delay-cut rect, .tl-k-cut { fill: #fde9b0; stroke: #a86d00; }
.tl-ev .tl-stopmark, .tl-k-stop { stroke: #b71c1c; stroke-width: 3.5; fill: none; }
.tl-ev .tl-cap { stroke: #a86d00; stroke-width: 2; fill: none; }
.tl-ev-delay-skipped path, .tl-k-skipped { stroke: #1565c0; stroke-width: 2; stroke-dasharray: 3 2; fill: none; }
.tl-broken rect { fill: #c62828; opacity: 0.07; }
.tl-broken line, .tl-k-broken { stroke: #c62828; stroke-width: 2.5; stroke-dasharray: 6 3; }
.tl-broken text { fill: #b71c1c; font-weight: 700; font-size: 12px; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
.tl-steps { font-size: 14px; }
.tl-steps li { margin: 2px 0; }
.tl-broken-step { font-weight: 600; color: #b71c1c; }
code { font-size: 0.95em; }
";
