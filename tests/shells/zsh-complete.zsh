# zsh -f zsh-complete.zsh MODULES FUNCTIONS COMPLETIONS 'line to complete'
# Prints, one per line and sorted, the candidates zsh's completion system offers for the
# line when Tab is pressed at its end, with the completion functions of COMPLETIONS
# (a folder holding `_celld-gen`). An interactive zsh runs on a pseudo-terminal (zpty);
# `compadd` is wrapped to print each candidate between markers.
module_path=($1)
zmodload zsh/zpty || exit 3
local mods=$1 funcs=$2 comps=$3 line=$4 out chunk
zpty z "$(readlink /proc/$$/exe) -f -i"
zpty -w z "module_path=($mods); fpath=($comps $funcs/**/*(/N) \$fpath)"
zpty -w z "PROMPT= ; RPROMPT="
zpty -w z "autoload -U compinit && compinit -u -d \${TMPDIR:-/tmp}/zcompdump-\$\$"
zpty -w z 'compadd () { builtin compadd -O __hits "$@"; print -l -- "<<${^__hits[@]}>>"; builtin compadd "$@" }'
zpty -w z "bindkey '^I' complete-word"
zpty -w z "print '<<ready>>'"
zpty -r z out '*<<ready>>*'
zpty -n -w z "$line"$'\t'
sleep 1
out=""
while zpty -r -t z chunk; do out+=$chunk; done
print -r -- "$out" | grep -o '<<[^<>]*>>' | sed 's/^<<//; s/>>$//' | grep -v '^ready$' | sort -u
zpty -d z
