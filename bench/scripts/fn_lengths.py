#!/usr/bin/env python3
# The longest functions of the given source trees, by brace count from each `fn` line to its
# closing brace (issue 27: at most 80 lines). Usage: bench/scripts/fn_lengths.py profiler/src profiler-core/src
import re,sys,os
res=[]
for root in sys.argv[1:]:
    for dp,_,fs in os.walk(root):
        for f in fs:
            if not f.endswith('.rs'): continue
            p=os.path.join(dp,f); lines=open(p).read().split('\n')
            i=0
            while i<len(lines):
                l=lines[i]
                if re.match(r'\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern "C"\s+)?fn\s+\w+',l):
                    depth=0; started=False; j=i
                    while j<len(lines):
                        for ch in lines[j]:
                            if ch=='{': depth+=1; started=True
                            elif ch=='}': depth-=1
                        if started and depth==0: break
                        if not started and lines[j].rstrip().endswith(';'): break
                        j+=1
                    if started: res.append((j-i+1,p,i+1,l.strip()[:60]))
                    i=j+1 if started else i+1
                else: i+=1
res.sort(reverse=True)
for r in res[:15]: print(r)
