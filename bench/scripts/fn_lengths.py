#!/usr/bin/env python3
# The longest functions of the given source trees, by brace count from each `fn` line to its
# closing brace (issue 27: at most 80 lines). Usage: bench/scripts/fn_lengths.py profiler/src profiler-core/src
# Braces inside comments, string literals (raw ones too) and char literals do not count: a
# `'{'` would otherwise run a function on to the end of its file.
import re,sys,os

def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out=[]; i=0; n=len(text)
    def blank(s): return ''.join('\n' if c=='\n' else ' ' for c in s)
    while i<n:
        c=text[i]
        if text.startswith('//',i):
            j=text.find('\n',i); j=n if j<0 else j
            out.append(blank(text[i:j])); i=j
        elif text.startswith('/*',i):
            depth=0; j=i
            while j<n:
                if text.startswith('/*',j): depth+=1; j+=2
                elif text.startswith('*/',j):
                    depth-=1; j+=2
                    if depth==0: break
                else: j+=1
            out.append(blank(text[i:j])); i=j
        elif (m:=re.compile(r'b?r(#*)"').match(text,i)) and (i==0 or not (text[i-1].isalnum() or text[i-1]=='_')):
            end='"'+m.group(1); j=text.find(end,m.end()); j=n if j<0 else j+len(end)
            out.append(blank(text[i:j])); i=j
        elif c=='"':
            j=i+1
            while j<n and text[j]!='"':
                j+=2 if text[j]=='\\' else 1
            out.append(blank(text[i:j+1])); i=j+1
        elif c=="'" and (m:=re.compile(r"'(\\.[^']*|[^'\\])'").match(text,i)):
            out.append(blank(m.group(0))); i=m.end()
        else:
            out.append(c); i+=1
    return ''.join(out)

res=[]
for root in sys.argv[1:]:
    for dp,_,fs in os.walk(root):
        for f in fs:
            if not f.endswith('.rs'): continue
            p=os.path.join(dp,f); text=open(p).read()
            lines=text.split('\n'); code=code_only(text).split('\n')
            i=0
            while i<len(lines):
                l=code[i]
                if re.match(r'\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern "C"\s+)?fn\s+\w+',lines[i]):
                    depth=0; started=False; j=i
                    while j<len(lines):
                        for ch in code[j]:
                            if ch=='{': depth+=1; started=True
                            elif ch=='}': depth-=1
                        if started and depth==0: break
                        if not started and code[j].rstrip().endswith(';'): break
                        j+=1
                    if started: res.append((j-i+1,p,i+1,lines[i].strip()[:60]))
                    i=j+1 if started else i+1
                else: i+=1
res.sort(reverse=True)
for r in res[:15]: print(r)
