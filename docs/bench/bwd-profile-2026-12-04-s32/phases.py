import csv, sys
f=sys.argv[1]; cuts=[(int(a),int(b),n) for a,b,n in (c.split(':',2) for c in sys.argv[2:])]
r=csv.reader(open(f)); k=next(r); h=next(r)
rows=[dict(zip(h,x)) for x in r if len(x)==len(h)]
S="Warp Stall Sampling (All Samples)"
tot=sum(int(x[S] or 0) for x in rows)
cov=0
for a,b,n in cuts:
    s=sum(int(x[S] or 0) for x in rows[a:b+1]); cov+=s
    print(f"{n:45s} {a:5d}-{b:5d} {s:7d} {100*s/tot:5.1f}%")
print("total", tot, "covered %.1f%%"%(100*cov/tot))
