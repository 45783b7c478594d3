"""Print the latest training loss and validation accuracies from each run's last.pt."""
import glob, torch
for p in sorted(glob.glob("outputs/*/runs/**/last.pt", recursive=True)):
    if "/prep/" in p:
        continue
    st = torch.load(p, map_location="cpu", weights_only=False)
    st = st.get("state", st)
    h = st.get("history", [])
    tl = [r for r in h if r.get("train_loss") is not None]
    va = [(r["step"], round(r["val_acc"], 4)) for r in h if r.get("val_acc") is not None]
    print(p.split("/")[1], "step", st.get("step"), "loss", [(r["step"], round(r["train_loss"], 4)) for r in tl[-200::25]][-8:], "val", va[-6:])
