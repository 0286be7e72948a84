import torch
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
a = torch.randn(256, 512, device="cuda"); b = torch.randn(128, 512, device="cuda")
for rw in (False, True):
    for out in (torch.float32, torch.bfloat16):
        for (da, db) in ((E4, E4), (E5, E4)):
            sa = torch.ones(256, 1, device="cuda") if rw else torch.ones((), device="cuda")
            sb = torch.ones(1, 128, device="cuda") if rw else torch.ones((), device="cuda")
            try:
                y = torch._scaled_mm(a.to(da), b.to(db).t(), sa, sb, out_dtype=out)
                print("rowwise" if rw else "tensorwise", out, da, db, "ok", y.dtype)
            except Exception as e:
                print("rowwise" if rw else "tensorwise", out, da, db, "refused:", str(e).split("\n")[0][:160])
# scale shape [1] for tensorwise
try:
    torch._scaled_mm(a.to(E4), b.to(E4).t(), torch.ones(1, device="cuda"), torch.ones(1, device="cuda"), out_dtype=torch.bfloat16); print("tensorwise [1] scales ok")
except Exception as e: print("tensorwise [1] refused", str(e)[:160])
# graph capture of _scaled_mm
g = torch.cuda.CUDAGraph(); aq = a.to(E4); bq = b.to(E4)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    torch._scaled_mm(aq, bq.t(), torch.ones(256, 1, device="cuda"), torch.ones(1, 128, device="cuda"), out_dtype=torch.bfloat16)
    with torch.cuda.graph(g):
        y = torch._scaled_mm(aq, bq.t(), torch.ones(256, 1, device="cuda"), torch.ones(1, 128, device="cuda"), out_dtype=torch.bfloat16)
g.replay(); torch.cuda.synchronize(); print("graph capture ok", y.float().abs().sum().item())
